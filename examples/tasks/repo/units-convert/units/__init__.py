from units.convert import convert
