from slugs.core import slugify
