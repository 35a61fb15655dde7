"""Every CTest test either has a file of its name (its name up to the first dot: test_hpz.shm_2nodes
is tests/test_hpz.c) in tests/ or examples/, or follows a naming rule of doc/testing.md ("Test
names and their files"): example_*, fsdp2_conformance_*, or a row of its table. A table row that
names no registered test fails too, so the table stays what the suite holds.
    check_test_names.py SOURCE_DIR CTEST_JSON   (CTEST_JSON: ctest --show-only=json-v1's output)"""
import json
import os
import re
import sys

RULES = ("example_", "fsdp2_conformance_")


def main():
    src, listing = sys.argv[1:3]
    with open(listing, encoding="utf-8") as f:
        names = sorted({t["name"].split(".")[0] for t in json.load(f)["tests"]})
    files = set()
    for top in ("tests", "examples"):
        for _, _, fs in os.walk(os.path.join(src, top)):
            files |= {f.split(".")[0] for f in fs}
    with open(os.path.join(src, "doc", "testing.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc.split("### Test names and their files", 1)
    if len(section) != 2:
        print("FAIL: doc/testing.md has no section 'Test names and their files'")
        return 1
    body = section[1].split("\n#", 1)[0]
    table = set(re.findall(r"^\| `([a-z0-9_]+)` \|", body, re.M))
    failures = []
    for name in names:
        if name in files or name.startswith(RULES):
            if name in table:
                failures.append(f"{name}: has a file of its name, yet a row in the table")
            continue
        if name not in table:
            failures.append(f"{name}: no file of its name and no row in doc/testing.md's table")
    for row in sorted(table - set(names)):
        failures.append(f"{row}: a row of doc/testing.md's table, but no such test")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"PASS: {len(names)} test names, {len(table)} of them mapped by doc/testing.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
