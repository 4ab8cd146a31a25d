def load(text):
    """Rows of a comma-separated text with a header line, as dicts."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    rows = []
    for line in lines[1:-1]:
        rows.append(dict(zip(header, (v.strip() for v in line.split(",")))))
    return rows
