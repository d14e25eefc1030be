"""``innet cache`` (what the caches hold) and ``innet cache clean`` (empty them).

The locations are :func:`sim.files.cache_dir`'s, the ones the builders write to
(``$XDG_CACHE_HOME/innet/<name>``, ``~/.cache`` when unset). MB here is 10^6 bytes of disk
usage, as ``du`` counts it.
"""

import argparse

from sim.cli.output import emit
from sim.files import CACHES, cache_dir, cache_usage, clean_cache

__all__ = ["register"]


def _mb(size):
    return size / 1e6


def _show_mb(size):
    """MB with one decimal; three below 0.1 MB, so a small cache does not read as empty."""
    mb = _mb(size)
    return f"{mb:.1f} MB" if mb >= 0.1 or size == 0 else f"{mb:.3f} MB"


def _entries(n):
    return f"{n} {'entry' if n == 1 else 'entries'}"


def _cmd_cache(args):
    rows = []
    for name, what in CACHES.items():
        entries, size = cache_usage(name)
        rows.append({"name": name, "path": str(cache_dir(name)), "entries": entries,
                     "bytes": size, "mb": round(_mb(size), 3), "holds": what})
    total = sum(r["bytes"] for r in rows)
    width = max(len(r["path"]) for r in rows)
    lines = ["innet caches (every entry is rebuilt on demand; `innet cache clean` empties "
             "them):"]
    lines += [f"  {r['name']:<6} {r['path']:<{width}}  {_entries(r['entries']):>12} "
              f"{_show_mb(r['bytes']):>11}  {r['holds']}" for r in rows]
    lines.append(f"  total {_show_mb(total)}")
    emit(args, {"caches": rows, "total_bytes": total, "total_mb": round(_mb(total), 3)},
         lines)
    return 0


def _cmd_clean(args):
    chosen = [name for name in CACHES if getattr(args, name)] or list(CACHES)
    rows = []
    for name in chosen:
        removed, freed, kept = clean_cache(name)
        rows.append({"name": name, "path": str(cache_dir(name)), "removed": removed,
                     "bytes_freed": freed, "mb_freed": round(_mb(freed), 3),
                     "kept_in_use": kept})
    total = sum(r["bytes_freed"] for r in rows)
    parts = []
    for r in rows:
        part = f"{r['name']} {_entries(r['removed'])} ({_show_mb(r['bytes_freed'])})"
        if r["kept_in_use"]:
            part += f", {r['kept_in_use']} kept: in use by a running innet"
        parts.append(part)
    lines = [f"freed {_show_mb(total)}: " + "; ".join(parts)]
    emit(args, {"cleaned": rows, "bytes_freed": total, "mb_freed": round(_mb(total), 3)},
         lines)
    return 0


def register(sub, parser_class):
    cache = sub.add_parser("cache", help="show the build caches (path, entries, MB); "
                                         "'cache clean' empties them")
    cache.add_argument("--json", action="store_true")
    cache.set_defaults(func=_cmd_cache)
    actions = cache.add_subparsers(dest="action", parser_class=parser_class)
    clean = actions.add_parser("clean", help="remove the cached builds (all caches, or those "
                                             "chosen); each is rebuilt on next use")
    for name, what in CACHES.items():
        clean.add_argument(f"--{name}", action="store_true",
                           help=f"only this cache: {what}")
    # SUPPRESS: `innet cache --json clean` keeps the --json given before the action.
    clean.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    clean.set_defaults(func=_cmd_clean)
