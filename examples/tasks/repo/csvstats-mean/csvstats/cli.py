from csvstats.loader import load
from csvstats.stats import mean


def column_mean(text, column):
    return mean(float(row[column]) for row in load(text))
