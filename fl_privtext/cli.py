"""The `fl-privtext` command line: run, privacy-report, audit (contract: docs/design.md, architecture.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence


def _parse_sets(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}.")
        out[key.strip()] = value.strip()
    return out


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fl-privtext", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="one federated experiment through Flower (Ray simulation)")
    run.add_argument("--config", help="TOML experiment file (overrides of the defaults)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key")
    run.add_argument("--output", help="output directory (default runs/<timestamp>)")
    run.add_argument("--quiet", action="store_true", help="no progress bars")

    rep = sub.add_parser("privacy-report", help="JSON privacy report of a mechanism (nominal and worst-case epsilon)")
    rep.add_argument("mechanism")
    rep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")

    aud = sub.add_parser("audit", help="empirical epsilon audit (Clopper-Pearson lower bound) of a mechanism")
    aud.add_argument("mechanism")
    aud.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    aud.add_argument("--samples", type=int, default=None, help="samples per input of the worst-case pair")
    aud.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        sets = _parse_sets(args.set)
        if args.command == "privacy-report":
            from fl_privtext.privacy.commands import privacy_report

            print(json.dumps(privacy_report(args.mechanism, sets), indent=2))
        elif args.command == "audit":
            from fl_privtext.privacy.commands import audit

            print(json.dumps(audit(args.mechanism, sets, samples=args.samples, seed=args.seed), indent=2))
        else:
            from fl_privtext.federation.runner import run_from_cli

            # progress bars redraw with carriage returns: in a log file (stderr not a terminal) they are garbage
            quiet = args.quiet or not sys.stderr.isatty()
            run_from_cli(config_path=args.config, sets=sets, output=args.output, quiet=quiet)
    except (ValueError, FileNotFoundError) as exc:
        print(f"fl-privtext {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _interrupted(args.command)
    return 0


def _interrupted(command: str) -> None:
    """Ctrl-C: stop now. Cached features are complete entries only (atomic renames) and results.json is written
    last and atomically, so nothing half-written is left; the next run reuses the cache or rebuilds it."""
    print(f"fl-privtext {command}: interrupted; the feature cache holds only complete entries and no partial "
          "results were written.", file=sys.stderr)
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass
    sys.stderr.flush()
    os._exit(130)  # worker threads (an extraction in progress) are abandoned, not joined


if __name__ == "__main__":
    sys.exit(main())
