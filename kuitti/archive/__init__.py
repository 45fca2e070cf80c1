"""Archives of a month of receipts (``kuitti archive export | verify | restore``).

An archive is a plain tar file: ``manifest.json`` first, then one zstd-compressed JSON-lines
member per table (``tables.PARTS``). ``fileformat`` writes, reads and checks the file without a
database; ``export`` and ``restore`` move a month between the database and a file. What an
archive holds, and what it deliberately does not, is ``tables.py``'s and docs/operations.md's
("Archives").
"""
