def tokenize(text):
    tokens, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or (ch == "-" and _starts_number(text, i, tokens)):
            j = i + 1
            while j < len(text) and (text[j].isdigit() or text[j] == "."):
                j += 1
            tokens.append(float(text[i:j]))
            i = j
        elif ch in "+-*/":
            tokens.append(ch)
            i += 1
        else:
            raise ValueError(f"unexpected {ch!r} at {i}")
    return tokens


def _starts_number(text, i, tokens):
    nxt = text[i + 1] if i + 1 < len(text) else ""
    return nxt.isdigit() and bool(tokens) and isinstance(tokens[-1], str)
