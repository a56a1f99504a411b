"""Sums meson's test logs of the given build dirs into "N passed, N failed".

Each meson test counts once (a unit-test executable, the lit suite as a
whole, ...); skipped tests are reported separately and count as neither.
"""
import json
import sys


def main(dirs):
    passed = failed = skipped = 0
    durations = []
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
            durations.append((r.get("duration", 0.0), f"{d}: {r.get('name')}"))
            result = r.get("result")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"FAILED: {d}: {r.get('name')} ({result})")
    # Where CI's time goes: the slowest tests, longest first.
    print("slowest tests (s):")
    for duration, name in sorted(durations, reverse=True)[:12]:
        print(f"{duration:7.1f}  {name}")
    if skipped:
        print(f"{skipped} skipped")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
