from router.core import Router
