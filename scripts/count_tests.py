"""Sums meson's test logs of the given build dirs into "N passed, N failed".

Each meson test counts once (a unit-test executable, the lit suite as a
whole, ...); skipped tests are reported separately and count as neither.
"""
import json
import sys


def main(dirs):
    passed = failed = skipped = 0
    for d in dirs:
        try:
            lines = open(f"{d}/meson-logs/testlog.json").read().splitlines()
        except OSError:
            print(f"{d}: no test log (build failed?)")
            failed += 1
            continue
        for line in lines:
            if not line.strip():
                continue
            r = json.loads(line)
            result = r.get("result")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"FAILED: {d}: {r.get('name')} ({result})")
    if skipped:
        print(f"{skipped} skipped")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
