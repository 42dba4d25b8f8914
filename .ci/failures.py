"""The failed tests of a JUnit report, one line each: what .ci/run prints last."""

import sys
import xml.etree.ElementTree as ET

failed = []
for case in ET.parse(sys.argv[1]).iter("testcase"):
    for outcome in ("failure", "error"):
        found = case.find(outcome)
        if found is not None:
            message = " ".join((found.get("message") or "").split())[:240]
            failed.append(f"ci: {outcome} {case.get('classname')}::{case.get('name')}: {message}")
print(f"ci: {len(failed)} failed", *failed, sep="\n")
