"""The `fl-privtext` command line: run, sweep, compare, ledger, privacy-report, audit (contract: docs/design.md,
architecture.md)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence

from fl_privtext.client.ledger import summary
from fl_privtext.config import ExperimentConfig
from fl_privtext.pipeline.preflight import check_run
from fl_privtext.privacy.commands import audit, privacy_report
from fl_privtext.rundir import INCOMPLETE_STATUS, WRITE_REASONS, WriteError, collect, describe
from fl_privtext.sweep import compare_from_cli, sweep_from_cli


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
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results of a finished run in --output (refused otherwise)")
    run.add_argument("--client-state", metavar="DIR", help="the clients' state (per-user ledgers, kept across runs "
                                                          "and sweeps); default <output>/clients")

    rep = sub.add_parser("privacy-report", help="JSON privacy report of a mechanism (nominal and worst-case epsilon)")
    rep.add_argument("mechanism")
    rep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")

    aud = sub.add_parser("audit", help="empirical epsilon audit (Clopper-Pearson lower bound) of a mechanism")
    aud.add_argument("mechanism")
    aud.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    aud.add_argument("--samples", type=int, default=None, help="samples per input of the worst-case pair")
    aud.add_argument("--seed", type=int, default=0)

    swp = sub.add_parser("sweep", help="a grid of points (TOML: [fixed] keys, [grid] key -> values) through one "
                                       "federation; resumable; writes table.csv, table.md and frontier plots")
    swp.add_argument("file", help="sweep TOML file")
    swp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one fixed key")
    swp.add_argument("--output", help="output directory (default: [sweep] output, else sweeps/<file stem>)")
    swp.add_argument("--quiet", action="store_true", help="no progress bar or per-point lines")
    swp.add_argument("--list", action="store_true", help="print the points and whether each is done, then exit")
    swp.add_argument("--client-state", metavar="DIR", help="the clients' state (per-user ledgers, kept across runs "
                                                          "and sweeps); default <output>/clients")

    led = sub.add_parser("ledger", help="the clients' per-user ledgers in a state directory: totals and refusals")
    led.add_argument("dir", help="a clients' state directory (<run>/clients, or a --client-state DIR)")
    led.add_argument("--json", action="store_true", help='print {"users", "max_epsilon_charged", "refusals", ...}')

    cmp = sub.add_parser("compare", help="tabulate finished runs (their results.json) side by side")
    cmp.add_argument("runs", nargs="+", metavar="RUN_DIR")
    cmp.add_argument("--csv", help="also write the table as CSV to this file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done; 2 a bad command line, configuration or input (one line on stderr); 1 a file that
    could not be written (one line naming it); 3 finished, but some artifact (a plot, summary.md, table.md) was
    not written: each was a warning, and the last line says so (fl_privtext.rundir)."""
    args = _build_parser().parse_args(argv)
    _COMMAND[0] = args.command
    if args.command in ("run", "sweep") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)  # handled at once, whatever thread or library is running
    with collect() as unwritten:
        status = _main(args)
    if status == 0 and unwritten:
        names = ", ".join(os.path.basename(u["file"]) for u in unwritten)
        print(f"fl-privtext {args.command}: incomplete: {len(unwritten)} file(s) not written ({names}; reasons "
              "above); everything else was written", file=sys.stderr)
        return INCOMPLETE_STATUS
    return status


def _main(args: argparse.Namespace) -> int:
    try:
        sets = _parse_sets(getattr(args, "set", []))
        if args.command == "privacy-report":
            print(json.dumps(privacy_report(args.mechanism, sets), indent=2))
        elif args.command == "audit":
            print(json.dumps(audit(args.mechanism, sets, samples=args.samples, seed=args.seed), indent=2))
        elif args.command == "sweep":
            sweep_from_cli(args.file, sets=sets, output=args.output, quiet=args.quiet, list_only=args.list,
                           client_state=args.client_state)
        elif args.command == "ledger":
            _ledger(args.dir, as_json=args.json)
        elif args.command == "compare":
            compare_from_cli(args.runs, csv_path=args.csv)
        else:
            # the whole configuration, before torch, Flower and Ray are imported (seconds; a minute under load)
            check_run(ExperimentConfig.load(args.config, sets), output=args.output, overwrite=args.overwrite)
            from fl_privtext.pipeline.runner import run_from_cli  # torch, flwr, ray (the simulation)

            # on a terminal a bar; when stderr is a file, a pipe or CI, plain periodic lines (fl_privtext.progress)
            run_from_cli(config_path=args.config, sets=sets, output=args.output, quiet=args.quiet,
                         overwrite=args.overwrite, client_state=args.client_state)
    except (ValueError, FileNotFoundError) as exc:
        print(f"fl-privtext {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except WriteError as exc:
        print(f"fl-privtext {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno not in WRITE_REASONS:  # a write error: one line naming the file
            raise
        # a write outside rundir (a log, the trackers, the feature cache) on a full disk: still one line
        print(f"fl-privtext {args.command}: error: {describe(exc.filename or 'the run files', exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        _interrupted(args.command, str(exc))
    return 0


def _ledger(directory: str, *, as_json: bool) -> None:
    """``fl-privtext ledger DIR``: per-user totals and refusals of the clients' state in DIR."""
    out = summary(directory)
    top = out["max_epsilon_charged"]
    if as_json:
        print(json.dumps({**out, "max_epsilon_charged": top if math.isfinite(top) else "inf"}, indent=2))
        return
    print(f"{out['users']} users charged; largest total of one user: epsilon {top:.6g} (basic composition over "
          f"every release and policy entry)")
    for n in out["nodes"]:
        print(f"  node {n['node']}: {n['users']} users, largest total {n['max_epsilon_charged']:.6g}")
    print(f"{len(out['refusals'])} refusals" + (":" if out["refusals"] else ""))
    for r in out["refusals"]:
        print(f"  node {r['node']} {r['kind']}: refused: {r['reason']} ({r['detail']})")


def _interrupted(command: str, kept: str = "") -> None:
    """Ctrl-C: stop now, with one line and no traceback. Cached features are complete entries or finished chunks
    (atomic renames) and results.json is written last and atomically, so nothing half-written is left; the next run
    resumes the extraction from its chunks. ``kept``: what the command kept instead (a sweep: its finished points)."""
    kept = kept or _KEPT.get(command, "")
    print(f"fl-privtext {command}: interrupted; " + (kept or "finished extraction chunks and cache entries are kept "
          "(the next run resumes), no results were written."), file=sys.stderr, flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # Flower's and Ray's threads report the shutdown with tracebacks: not the user's concern
    import threading

    def shutdown_ray() -> None:
        import contextlib

        with contextlib.suppress(Exception):  # best effort on the way out
            import ray

            if ray.is_initialized():
                ray.shutdown()

    t = threading.Thread(target=shutdown_ray, daemon=True)
    t.start()
    t.join(timeout=5)
    os._exit(130)  # worker threads (an extraction in progress, Flower's loops) are abandoned, not joined


def _on_sigint(signum: int, frame: object) -> None:
    _interrupted(_COMMAND[0])


_COMMAND = ["run"]
_KEPT = {"sweep": "every finished point is kept in <output>/points (written as it finished); rerun the same command "
                  "to run only the missing ones."}


if __name__ == "__main__":
    sys.exit(main())
