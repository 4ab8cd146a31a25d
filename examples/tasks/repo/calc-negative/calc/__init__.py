from calc.evaluator import evaluate
