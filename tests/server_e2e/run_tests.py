#!/usr/bin/env python3
"""Runs the end-to-end tests of `dsv4 serve` (tests/server_e2e/test_*.py): the real `openai` client, curl and raw
HTTP against the built binary on a model directory. CTest runs it per group (tests/CMakeLists.txt); by hand:

    python3 tests/server_e2e/run_tests.py --dsv4 build/tools/dsv4/dsv4 --model tests/fixtures/official-trained-bytes
    python3 tests/server_e2e/run_tests.py ... test_load            # one module
    python3 tests/server_e2e/run_tests.py ... test_chat.ChatTest.test_streaming_equals_non_streaming

No test skips: a missing `openai` package or curl binary is a failure (scripts/setup.sh installs both)."""

import argparse
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsv4", required=True, help="the dsv4 binary")
    parser.add_argument("--model", required=True, help="model directory (the trained-bytes fixture)")
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--load-clients", type=int, default=64, help="concurrent clients of the load test")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("tests", nargs="*", help="modules, classes or methods (default: every test_*.py)")
    args = parser.parse_args()

    try:
        import openai  # noqa: F401  (the tests need the real client; a missing one fails, it never skips)
    except ImportError:
        print("FAIL: the Python package `openai` is not installed; run scripts/setup.sh "
              "(or python3 -m pip install openai)", file=sys.stderr)
        return 1
    for path in (args.dsv4, os.path.join(args.model, "config.json")):
        if not os.path.exists(path):
            print(f"FAIL: {path} does not exist", file=sys.stderr)
            return 1

    os.environ["DSV4_BIN"] = os.path.abspath(args.dsv4)
    os.environ["DSV4_MODEL"] = os.path.abspath(args.model)
    os.environ["DSV4_BACKEND"] = args.backend
    os.environ["DSV4_LOAD_CLIENTS"] = str(args.load_clients)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the openai client honours proxy variables
    sys.path.insert(0, HERE)
    import harness

    loader = unittest.TestLoader()
    if args.tests:
        suite = loader.loadTestsFromNames(args.tests)
    else:
        suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    start = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2 if args.verbose else 1, stream=sys.stdout).run(suite)
    ok = result.wasSuccessful()
    try:
        harness.stop_shared_server()
    except AssertionError as e:
        print(f"FAIL: the shared server: {e}", file=sys.stderr)
        ok = False
    if result.skipped:  # a CPU test never skips
        print(f"FAIL: {len(result.skipped)} tests skipped: {[str(t) for t, _ in result.skipped]}", file=sys.stderr)
        ok = False
    if result.testsRun == 0:
        print("FAIL: no test ran", file=sys.stderr)
        ok = False
    print(f"server_e2e: {result.testsRun} tests in {time.monotonic() - start:.1f} s: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
