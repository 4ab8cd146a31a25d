from router.patterns import compile_route


class Router:
    def __init__(self):
        self.routes = []

    def add(self, route, name):
        self.routes.append((compile_route(route), name))

    def match(self, path):
        for regex, name in self.routes:
            m = regex.match(path)
            if m:
                return name, m.groupdict()
        return None
