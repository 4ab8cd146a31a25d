from memo.api import cached
