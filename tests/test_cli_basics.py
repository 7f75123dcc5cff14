"""The CLI shell: version, help, error rendering."""

from types import SimpleNamespace

from srift.cli import main
from srift.errors import SriftError, closest


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "srift 0.1.0" in capsys.readouterr().out


def test_bad_flag_is_usage_error():
    assert main(["--no-such-flag"]) == 2


def test_srift_error_renders_error_and_fix(capsys, monkeypatch):
    from srift import cli

    monkeypatch.delenv("SRIFT_DEBUG", raising=False)

    def boom(*args, **kwargs):
        raise SriftError("the thing is wrong.", "do the other thing.")

    monkeypatch.setattr(cli, "command", lambda: SimpleNamespace(main=boom))
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "Error: the thing is wrong." in err
    assert "To fix: do the other thing." in err
    assert "Traceback" not in err


def test_closest_suggests_near_names():
    assert closest("p4d.24xlarg", ["p4d.24xlarge", "p3.2xlarge", "g5.xlarge"])[0] == "p4d.24xlarge"
