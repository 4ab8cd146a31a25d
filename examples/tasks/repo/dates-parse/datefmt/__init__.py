from datefmt.format import format_iso
