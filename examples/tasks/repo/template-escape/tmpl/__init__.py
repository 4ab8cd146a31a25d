from tmpl.render import render
