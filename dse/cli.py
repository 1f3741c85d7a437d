"""The ``dse`` command: a thin typer layer over :mod:`dse.estimate`, the catalog and validation.

No model logic lives here. Each command is a function of :mod:`dse.commands` (one module per
group: ``estimate``, ``techniques``, ``catalog``, ``validation``, ``search``; the shared flag types
in ``options``), registered on :data:`app` below in the order ``dse --help`` lists them. Bad input
of any kind ends in one line on stderr and exit status 2 (see :func:`main`).
"""

from __future__ import annotations

import sys
import warnings

import typer

from dse.commands import catalog, estimate, search, techniques, validation

try:  # typer >= 0.22 vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer depends on click
    from click import exceptions as click_exc

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Cost model and design-space exploration for training LLMs on memory-constrained systems.")

app.command()(estimate.estimate)
app.command()(techniques.rok)
app.command("offload-compare")(techniques.offload_compare)
app.command("list")(catalog.list_)
app.command()(catalog.show)
app.command()(validation.validate)
app.command()(validation.calibrate)
app.command()(validation.measure)
app.command("chiplet-scaling")(techniques.chiplet_scaling)
app.command("chiplet-compare")(techniques.chiplet_compare)
app.command()(search.search)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    sys.stderr.write(f"dse: warning: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; bad input becomes one line on stderr and exit status 2."""
    from dse.errors import InputError

    args = sys.argv[1:] if argv is None else argv
    command = typer.main.get_command(app)
    try:
        with warnings.catch_warnings():     # dse's own deprecations (e.g. a hardware file without kind:), one line each
            warnings.filterwarnings("default", category=DeprecationWarning, module=r"dse(\.|$)")
            warnings.showwarning = _show_warning
            rv = command.main(args=args, prog_name="dse", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except InputError as exc:
        sys.stderr.write(f"dse: error: {exc}\n")
        return 2
    except click_exc.NoArgsIsHelpError as exc:  # pragma: no cover - typer/click version dependent
        sys.stdout.write(exc.ctx.get_help() + "\n")
        return 0
    except click_exc.UsageError as exc:
        where = f" ({exc.ctx.command_path})" if exc.ctx is not None else ""
        msg = " ".join(exc.format_message().split())
        sys.stderr.write(f"dse: error{where}: {msg}\n")
        return 2
    except (typer.Exit, getattr(click_exc, "Exit", typer.Exit)) as exc:
        return getattr(exc, "exit_code", 1)
    except (typer.Abort, getattr(click_exc, "Abort", typer.Abort)):
        sys.stderr.write("dse: aborted\n")
        return 130
    except BrokenPipeError:  # pragma: no cover
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
