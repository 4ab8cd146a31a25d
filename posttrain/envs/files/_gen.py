"""Procedural files tasks: a generated workspace, an instruction, and a gold program.

Six kinds of work, each a workspace maker plus a gold program that reads the workspace's *bytes*
the way an agent would (``csv``, ``json``, ``sqlite3``, the encodings the instruction names) and
returns the files it writes; the task's targets are derived from the gold's writes:

| kind | inputs | asks for | what can go wrong in the inputs |
|---|---|---|---|
| sales | data/sales.csv | reports/summary.json (totals by region, row counts) | malformed rows (n/a, missing or extra fields, a decimal comma) |
| contacts | contacts.csv | contacts.csv cleaned in place, contacts.log | spaces, upper case, duplicates, empty emails, short rows |
| inventory | inventory/*.json | out/stock.csv, out/errors.json (and out/by_city.json) | truncated JSON, missing or mistyped fields |
| notes | notes/*.md | archived notes moved to archive/, notes/INDEX.md, status.json | a note without a status, a UTF-16 note (titles not in the file names) |
| merge | exports/YYYY-MM.csv | out/combined.csv, out/missing.txt | missing months, a Latin-1 file, a byte-order mark |
| sqlite | db/shop.sqlite | reports/countries.md (an exact Markdown table) | orphan orders, NULL amounts |

Difficulty (``level`` 1-5) sets the sizes, which of the input problems appear, which kinds are drawn
(level 1: sales, contacts, inventory; 2 adds notes; 3 merge; 4 sqlite) and, at level 5, two kinds in
one workspace. Every workspace also holds files the task does not ask to change (a README, a to-do
note), so collateral damage shows. Generators are deterministic in their seed.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

LEVELS = (1, 2, 3, 4, 5)


@dataclass
class Part:
    """One kind's share of a task: its workspace files, instruction, inputs, and the gold's writes.

    ``formats[path]`` is how a written path is compared: ``json``, ``csv``, ``text``, or
    ``("same_as", source)`` for a file moved unchanged; a path written ``None`` must be absent."""

    workspace: dict[str, bytes]
    instruction: str
    inputs: list[str]
    writes: dict[str, bytes | None] = field(default_factory=dict)
    formats: dict[str, str | tuple[str, str]] = field(default_factory=dict)


def csv_bytes(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def json_bytes(value: object) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False, default=_plain) + "\n").encode()


def _plain(value: object) -> object:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(type(value).__name__)


def _money(rng: random.Random, lo: int = 100, hi: int = 99999) -> str:
    cents = rng.randint(lo, hi)
    return f"{cents // 100}.{cents % 100:02d}"


_FIRST = ("Ada", "Bruno", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kofi", "Lena",
          "Mateo", "Nia", "Omar", "Priya")
_LAST = ("Okafor", "Silva", "Wang", "Novak", "Haddad", "Berg", "Kim", "Moreau", "Rossi", "Mensah", "Ivanova", "Lopez")
_ACCENTED = ("José Núñez", "Zoë Ångström", "François Lévêque", "Søren Kierkegård", "Inés Muñoz", "Björn Æsir",
             "Chloé Dupré", "Renée Façade")
_PLAIN = tuple(f"{f} {la}" for f, la in zip(_FIRST, _LAST * 2, strict=False))


# ---------------------------------------------------------------- sales

_REGIONS = ("North", "South", "East", "West", "Central")
_PRODUCTS = ("widget", "gadget", "sprocket", "gizmo", "bracket")


def _sales(rng: random.Random, level: int) -> Part:
    n_rows, n_bad = (6, 12, 24, 48, 96)[level - 1], (0, 2, 3, 5, 8)[level - 1]
    regions = rng.sample(_REGIONS, min(2 + level // 2, len(_REGIONS)))
    rows = [[f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", rng.choice(regions), rng.choice(_PRODUCTS),
             str(rng.randint(1, 40)), _money(rng, 100, 9999)] for _ in range(n_rows)]
    # a row spoiled may be one spoiled before, short of its price: r[4:5], never r[4] (IndexError)
    spoil: list[Callable[[list[str]], list[str]]] = [
        lambda r: [*r[:3], "n/a", *r[4:5]], lambda r: [*r[:4], ""], lambda r: r[:4], lambda r: [*r, "late"],
        lambda r: [*r[:3], "2.5", *r[4:5]], lambda r: [*r[:4], *(p.replace(".", ",") for p in r[4:5])]]
    for i in range(n_bad):
        rows.insert(rng.randint(0, len(rows)), spoil[i % len(spoil)](list(rows[rng.randrange(len(rows))])))
    workspace = {"data/sales.csv": csv_bytes([["date", "region", "product", "units", "unit_price"], *rows])}
    instruction = (
        "Read data/sales.csv (columns date, region, product, units, unit_price). A data row is valid when it has "
        "exactly 5 fields, units is a whole number (digits only) and unit_price is a decimal number written with "
        "digits and an optional '.' part; every other data row is skipped. Write reports/summary.json: a JSON "
        'object with the keys "revenue_by_region" (an object mapping each region that has a valid row to the sum '
        'of units x unit_price over its valid rows), "total_revenue" (the same sum over all valid rows), '
        '"valid_rows" and "skipped_rows" (numbers of data rows; the header is not a data row). Write amounts as '
        "JSON numbers, exactly (no rounding is needed).")
    part = Part(workspace, instruction, ["data/sales.csv"])
    part.writes["reports/summary.json"] = gold_sales(workspace["data/sales.csv"])
    part.formats["reports/summary.json"] = "json"
    return part


def gold_sales(data: bytes) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))[1:]
    by_region: dict[str, Decimal] = {}
    valid = 0
    for row in rows:
        if len(row) == 5 and re.fullmatch(r"[0-9]+", row[3]) and re.fullmatch(r"[0-9]+(\.[0-9]+)?", row[4]):
            by_region[row[1]] = by_region.get(row[1], Decimal(0)) + int(row[3]) * Decimal(row[4])
            valid += 1
    return json_bytes({"revenue_by_region": by_region, "total_revenue": sum(by_region.values(), Decimal(0)),
                       "valid_rows": valid, "skipped_rows": len(rows) - valid})


# ---------------------------------------------------------------- contacts (clean in place)

_DOMAINS = ("example.com", "mail.example.org", "corp.example.net")


def _contacts(rng: random.Random, level: int) -> Part:
    n = (4, 7, 10, 14, 20)[level - 1]
    people = rng.sample([(f, la) for f in _FIRST for la in _LAST], n)
    rows = []
    for first, last in people:
        name = f"{first} {last}" if level < 3 or rng.random() < 0.7 else f"{last}, {first}"
        email = f"{first}.{last}@{rng.choice(_DOMAINS)}"
        rows.append([name, email, f"+1-555-01{rng.randint(0, 99):02d}"])
    messy = []
    for name, email, phone in rows:
        if rng.random() < 0.6:
            name = rng.choice([" ", "  ", "\t"]) + name + rng.choice(["", " ", "  "])
        if rng.random() < 0.5:
            email = rng.choice([email.upper(), email.title(), " " + email])
        messy.append([name, email, phone])
    if level >= 2:
        for _ in range(level - 1):
            twin = list(rng.choice(rows))
            messy.insert(rng.randint(1, len(messy)), [twin[0], " " + twin[1].upper() + " ", twin[2]])
        messy.insert(rng.randint(0, len(messy)), [rng.choice(_PLAIN), "", "+1-555-0199"])
    if level >= 4:
        messy.insert(rng.randint(0, len(messy)), [rng.choice(_PLAIN)])
    workspace = {"contacts.csv": csv_bytes([["name", "email", "phone"], *messy])}
    short = " A row with fewer than 3 fields has an empty email." if level >= 4 else ""
    instruction = (
        "Clean contacts.csv in place; keep it UTF-8 CSV with its header name,email,phone. Trim spaces and tabs at "
        "both ends of every field, write every email in lower case, drop the rows whose email is empty, then keep "
        f"only the first row for each email. Keep the remaining rows in their order.{short} Then write "
        "contacts.log holding the single line `dropped: N`, N being the number of data rows removed.")
    part = Part(workspace, instruction, ["contacts.csv"])
    cleaned, dropped = gold_contacts(workspace["contacts.csv"])
    part.writes.update({"contacts.csv": cleaned, "contacts.log": f"dropped: {dropped}\n".encode()})
    part.formats.update({"contacts.csv": "csv", "contacts.log": "text"})
    return part


def gold_contacts(data: bytes) -> tuple[bytes, int]:
    header, *rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    kept, seen = [], set()
    for row in rows:
        fields = [f.strip(" \t") for f in row]
        if len(fields) < 3 or not fields[1]:
            continue
        fields[1] = fields[1].lower()
        if fields[1] not in seen:
            seen.add(fields[1])
            kept.append(fields)
    return csv_bytes([header, *kept]), len(rows) - len(kept)


# ---------------------------------------------------------------- inventory (JSON files)

_CITIES = ("Lyon", "Porto", "Osaka", "Quito", "Accra", "Perth", "Oslo")
_ITEMS = ("hex bolt", "wing nut", "spring washer", "cable tie", "hinge", "bracket", "rivet", "gasket", "pulley",
          "bearing", "clamp", "dowel")


def _inventory(rng: random.Random, level: int) -> Part:
    n = (4, 6, 9, 14, 20)[level - 1]
    skus = sorted(rng.sample([f"{c}-{k}" for c in "ABCDEFGH" for k in range(100, 400)], n))
    workspace = {}
    bad = rng.sample(skus, min(n - 2, (0, 1, 2, 3, 4)[level - 1]))
    for sku in skus:
        item: dict[str, object] = {"sku": sku, "name": rng.choice(_ITEMS), "qty": rng.randint(0, 500),
                                   "location": {"warehouse": f"W{rng.randint(1, 4)}", "city": rng.choice(_CITIES)}}
        text = json.dumps(item, indent=2)
        if sku in bad:
            how = bad.index(sku) % (1 if level < 3 else 3 if level < 4 else 4)
            if how == 0:
                text = text[: rng.randint(5, len(text) - 3)]
            elif how == 1:
                text = json.dumps({k: v for k, v in item.items() if k != "qty"}, indent=2)
            elif how == 2:
                text = json.dumps({**item, "location": {"warehouse": "W1"}}, indent=2)
            else:
                text = json.dumps({**item, "qty": str(item["qty"])}, indent=2)
        workspace[f"inventory/item-{sku}.json"] = (text + "\n").encode()
    by_city = level >= 4
    instruction = (
        "Each file inventory/item-*.json describes one item. A file is well-formed when it is valid JSON holding an "
        "object with a string sku, a string name, an integer qty and an object location with a string city; any "
        "other file is malformed. Write out/stock.csv (UTF-8) with the header sku,name,qty,city and one row per "
        "well-formed file, sorted by sku. Write out/errors.json as {\"malformed\": [...]}: the paths of the "
        "malformed files (like inventory/item-A-100.json), sorted."
        + (" Also write out/by_city.json: an object mapping each city of a well-formed item to the total qty of "
           "its well-formed items." if by_city else ""))
    part = Part(workspace, instruction, sorted(workspace))
    part.writes.update(gold_inventory(workspace, by_city))
    part.formats.update({"out/stock.csv": "csv", "out/errors.json": "json"})
    if by_city:
        part.formats["out/by_city.json"] = "json"
    return part


def gold_inventory(files: dict[str, bytes], by_city: bool) -> dict[str, bytes | None]:
    rows, malformed, totals = [], [], {}
    for path in sorted(p for p in files if p.startswith("inventory/") and p.endswith(".json")):
        try:
            item = json.loads(files[path].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            item = None
        loc = item.get("location") if isinstance(item, dict) else None
        if not (isinstance(item, dict) and isinstance(item.get("sku"), str) and isinstance(item.get("name"), str)
                and type(item.get("qty")) is int and isinstance(loc, dict) and isinstance(loc.get("city"), str)):
            malformed.append(path)
            continue
        rows.append([item["sku"], item["name"], str(item["qty"]), loc["city"]])
        totals[loc["city"]] = totals.get(loc["city"], 0) + item["qty"]
    out: dict[str, bytes | None] = {
        "out/stock.csv": csv_bytes([["sku", "name", "qty", "city"], *sorted(rows)]),
        "out/errors.json": json_bytes({"malformed": malformed})}
    if by_city:
        out["out/by_city.json"] = json_bytes(totals)
    return out


# ---------------------------------------------------------------- notes (move + index)

_TOPICS = ("Quarterly review", "Vendor onboarding", "Office move", "Hiring plan", "Budget draft", "Security audit",
           "Release checklist", "Team offsite", "Backup policy", "Customer survey", "Roadmap", "Incident report")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def _notes(rng: random.Random, level: int) -> Part:
    n = (3, 4, 6, 8, 10)[level - 1]
    topics = rng.sample(_TOPICS, n)
    statuses = ["archived", "open"] + [rng.choice(["open", "done", "archived"]) for _ in range(n - 2)]
    rng.shuffle(statuses)
    no_status = rng.choice([i for i, s in enumerate(statuses) if s == "open"]) if level >= 3 else None
    utf16 = rng.randrange(n) if level >= 4 else None
    workspace = {}
    for i, (topic, status) in enumerate(zip(topics, statuses, strict=True)):
        slug = topic.lower().replace(" ", "-")
        # the title is more than the file name says: a note never read (the UTF-16 one) cannot be indexed
        # from its name, its status tried in turn over the repair attempts (that passed 80 of 80)
        title = f"{topic} ({rng.choice(_MONTHS)})"
        status_line = "" if i == no_status else f"Status: {status}\n"
        body = f"# {title}\n\n{status_line}Owner: {rng.choice(_FIRST)}\n\n{rng.choice(_FIRST)} to follow up by week {rng.randint(1, 52)}.\n"
        workspace[f"notes/{slug}.md"] = body.encode("utf-16") if i == utf16 else body.encode()
    rules = " A note without a Status line is open." if no_status is not None else ""
    legacy = ""
    if utf16 is not None:
        legacy = f" The notes are UTF-8 except {_path_of(workspace, utf16)}, which is UTF-16."
    instruction = (
        "Each note notes/*.md starts with a title line `# <title>` and has a line `Status: open`, `Status: done` or "
        f"`Status: archived`.{rules}{legacy} Move every archived note into archive/ (same file name, content "
        "unchanged). Then write notes/INDEX.md (UTF-8): the line `# Index`, an empty line, then one line "
        "`- [<title>](<file name>) — <status>` for each note left in notes/, sorted by file name. Finally write "
        "status.json: an object with the keys open, done and archived, each the number of notes that had that "
        "status before the move.")
    part = Part(workspace, instruction, sorted(workspace))
    writes, formats = gold_notes(workspace, utf16_path=_path_of(workspace, utf16) if utf16 is not None else None)
    part.writes.update(writes)
    part.formats.update(formats)
    return part


def _path_of(workspace: dict[str, bytes], index: int | None) -> str:
    return list(workspace)[index] if index is not None else ""


def gold_notes(files: dict[str, bytes], utf16_path: str | None) -> tuple[dict[str, bytes | None], dict]:
    counts = {"open": 0, "done": 0, "archived": 0}
    left, writes, formats = [], {}, {}
    for path in sorted(p for p in files if p.startswith("notes/") and p.endswith(".md")):
        text = files[path].decode("utf-16" if path == utf16_path else "utf-8")
        title = text.split("\n", 1)[0].removeprefix("# ").strip()
        found = re.search(r"^Status: (open|done|archived)$", text, re.MULTILINE)
        status = found.group(1) if found else "open"
        counts[status] += 1
        name = path.removeprefix("notes/")
        if status == "archived":
            writes[path], writes[f"archive/{name}"] = None, files[path]
            formats[f"archive/{name}"] = ("same_as", path)
        else:
            left.append(f"- [{title}]({name}) — {status}")
    writes["notes/INDEX.md"] = ("# Index\n\n" + "\n".join(left) + "\n").encode()
    writes["status.json"] = json_bytes(counts)
    formats.update({"notes/INDEX.md": "text", "status.json": "json"})
    return writes, formats


# ---------------------------------------------------------------- merge (monthly exports)


def _merge(rng: random.Random, level: int) -> Part:
    months = [f"2024-{m:02d}" for m in range(1, (3, 3, 4, 5, 6)[level - 1] + 1)]
    missing = set(rng.sample(months[1:], (0, 1, 1, 2, 2)[level - 1]))
    present = [m for m in months if m not in missing]
    latin1 = rng.choice(present) if level >= 3 else None
    bom = rng.choice([m for m in present if m != latin1]) if level >= 5 and len(present) > 1 else None
    workspace = {}
    for month in present:
        names = rng.sample(_ACCENTED + _PLAIN, (3, 4, 5, 6, 8)[level - 1])
        if month == latin1 and not any(ord(c) > 127 for c in "".join(names)):
            names[0] = rng.choice(_ACCENTED[:6])  # all Latin-1, so the file can be written in it
        text = "".join(f"{n},{_money(rng)}\n" for n in names)
        text = "customer,amount\n" + text
        if month == latin1:
            workspace[f"exports/{month}.csv"] = text.encode("latin-1")
        else:
            workspace[f"exports/{month}.csv"] = ("\ufeff" if month == bom else "").encode() + text.encode()
    notes = ""
    if latin1:
        notes += f" The files are UTF-8 except exports/{latin1}.csv, which a legacy tool saved in Latin-1 (ISO-8859-1)."
    if bom:
        notes += " A file may start with a UTF-8 byte-order mark, which is not part of its header."
    instruction = (
        f"The folder exports/ should hold one CSV per month from {months[0]} to {months[-1]}, named YYYY-MM.csv, "
        f"with the header customer,amount.{notes} Combine them into out/combined.csv (UTF-8) with the header "
        "month,customer,amount: one row per data row of every file, month being the file's YYYY-MM, sorted by month "
        "and then by customer (plain Unicode code-point order); write amounts exactly as in the files. Write "
        "out/missing.txt listing each month of the range that has no file, one YYYY-MM per line, in order (an "
        "empty file when none is missing).")
    part = Part(workspace, instruction, sorted(workspace))
    part.writes.update(gold_merge(workspace, months, latin1))
    part.formats.update({"out/combined.csv": "csv", "out/missing.txt": "text"})
    return part


def gold_merge(files: dict[str, bytes], months: list[str], latin1: str | None) -> dict[str, bytes | None]:
    rows, missing = [], []
    for month in months:
        data = files.get(f"exports/{month}.csv")
        if data is None:
            missing.append(month)
            continue
        text = data.decode("latin-1" if month == latin1 else "utf-8-sig")
        for row in list(csv.reader(io.StringIO(text, newline="")))[1:]:
            rows.append([month, row[0], row[1]])
    rows.sort(key=lambda r: (r[0], r[1]))
    return {"out/combined.csv": csv_bytes([["month", "customer", "amount"], *rows]),
            "out/missing.txt": "".join(m + "\n" for m in missing).encode()}


# ---------------------------------------------------------------- sqlite


def _sqlite(rng: random.Random, level: int) -> Part:
    n_c, n_o = (3, 4, 6, 8, 10)[level - 1], (6, 10, 18, 30, 45)[level - 1]
    countries = rng.sample(("France", "Ghana", "Japan", "Peru", "Norway", "Chile", "Kenya", "Spain"),
                           min(n_c, 2 + level // 2))
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL)")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, amount_cents INTEGER, "
               "status TEXT NOT NULL)")
    for cid, name in enumerate(rng.sample(_PLAIN, n_c), start=1):
        db.execute("INSERT INTO customers VALUES (?, ?, ?)", (cid, name, countries[cid % len(countries)]))
    orphans, nulls = level >= 3, level >= 4
    for oid in range(1, n_o + 1):
        cid = rng.randint(1, n_c) if not (orphans and oid % 7 == 3) else n_c + rng.randint(1, 9)
        amount = rng.randint(500, 250000) if not (nulls and oid % 9 == 4) else None
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)",
                   (oid, cid, amount, "paid" if oid % 3 else rng.choice(["refunded", "pending", "paid"])))
    db.commit()
    data = db.serialize()
    db.close()
    workspace = {"db/shop.sqlite": bytes(data)}
    extra = (" Orders whose customer is not in customers are left out." if orphans else "") + (
        " Orders whose amount_cents is NULL are left out." if nulls else "")
    instruction = (
        "The SQLite database db/shop.sqlite has the tables customers(id, name, country) and orders(id, customer_id, "
        f"amount_cents, status). Take the orders whose status is 'paid'.{extra} For each country of their "
        "customers, count those orders and total their amount_cents. Write reports/countries.md exactly like this: "
        "the line `# Paid orders by country`, an empty line, the line `| country | orders | revenue |`, the line "
        "`|---|---:|---:|`, then one line `| <country> | <orders> | <revenue> |` per country, revenue in dollars "
        "with two decimals (like 1234.50), sorted by revenue, highest first (equal revenues: by country name). "
        "Do not change the database.")
    part = Part(workspace, instruction, ["db/shop.sqlite"])
    part.writes["reports/countries.md"] = gold_sqlite(workspace["db/shop.sqlite"])
    part.formats["reports/countries.md"] = "text"
    return part


def gold_sqlite(data: bytes) -> bytes:
    db = sqlite3.connect(":memory:")
    db.deserialize(data)
    rows = db.execute("SELECT c.country, COUNT(*), SUM(o.amount_cents) FROM orders o JOIN customers c "
                      "ON c.id = o.customer_id WHERE o.status = 'paid' AND o.amount_cents IS NOT NULL "
                      "GROUP BY c.country").fetchall()
    db.close()
    rows.sort(key=lambda r: (-r[2], r[0]))
    lines = ["# Paid orders by country", "", "| country | orders | revenue |", "|---|---:|---:|"]
    lines += [f"| {country} | {count} | {cents // 100}.{cents % 100:02d} |" for country, count, cents in rows]
    return ("\n".join(lines) + "\n").encode()


KINDS: dict[str, Callable[[random.Random, int], Part]] = {
    "sales": _sales, "contacts": _contacts, "inventory": _inventory, "notes": _notes, "merge": _merge,
    "sqlite": _sqlite}
LEVEL_KINDS = {1: ("sales", "contacts", "inventory"), 2: ("sales", "contacts", "inventory", "notes"),
               3: ("sales", "contacts", "inventory", "notes", "merge"), 4: tuple(KINDS), 5: tuple(KINDS)}

_README = ("# Shared workspace\n\nData exports and notes for the operations team. Do not edit files you were not "
           "asked to change.\n")
_TODO = "- [ ] check last week's numbers\n- [ ] archive old notes\n"


def make_task_parts(rng: random.Random, level: int, kinds: list[str] | None = None) -> tuple[list[str], Part]:
    """The kinds drawn for one task at ``level`` (or the ``kinds`` given) and their combined part
    (two kinds at level 5)."""
    kinds = kinds or rng.sample(LEVEL_KINDS[level], 2 if level == 5 else 1)
    parts = [KINDS[k](rng, level) for k in kinds]
    whole = Part({"README.md": _README.encode(), "todo.md": _TODO.encode()}, "", [])
    for part in parts:
        whole.workspace.update(part.workspace)
        whole.inputs += part.inputs
        whole.writes.update(part.writes)
        whole.formats.update(part.formats)
    if len(parts) == 1:
        whole.instruction = parts[0].instruction
    else:
        whole.instruction = "Do both of these jobs.\n\n" + "\n\n".join(f"{i}. {p.instruction}" for i, p in
                                                                     enumerate(parts, start=1))
    whole.instruction += " Change no other file."
    return kinds, whole
