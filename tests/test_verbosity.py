"""-v / -q: srift's warnings and progress lines, and Python warnings of the libraries it uses, go
through logging; -q leaves errors only, -v adds the progress lines a CI log wants."""

from __future__ import annotations

import io
import json
import logging
import os
import time
import warnings

import pytest

import srift.catalog.aws as aws
from srift import log
from srift.catalog.load import bundled_path, cache_path, clear_cache
from srift.cli import main
from srift.testing import price_list_csv, price_list_row


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    clear_cache()
    yield tmp_path
    clear_cache()
    log.configure(0)
    logging.captureWarnings(False)


def _broken_cache() -> None:
    path = cache_path("aws", "us-west-2")
    path.parent.mkdir(parents=True)
    path.write_text(bundled_path("aws").read_text().splitlines()[0] + "\naws,us-west-2,g5.xlarge,g5")  # cut off mid-row
    future = time.time() + 60
    os.utime(path, (future, future))


@pytest.mark.parametrize("flags,shown", [([], True), (["-q"], False), (["--quiet"], False), (["-v"], True)])
def test_quiet_hides_warnings_and_errors_stay(flags, shown, capsys):
    _broken_cache()
    assert main([*flags, "catalog", "show", "g5.xlarge", "--infra", "aws/us-west-2"]) == 0
    assert ("Warning: ignoring the unreadable catalog cache" in capsys.readouterr().err) == shown
    assert main([*flags, "catalog", "show", "g9.nothing"]) == 2
    assert capsys.readouterr().err.startswith("Error: ")  # -q never hides an error


def test_verbose_shows_the_refresh_steps_in_a_log(monkeypatch, capsys):
    files = {aws.REGION_OFFER_URL.format(region="us-west-2"): price_list_csv([price_list_row("S", "g5.xlarge", 1.006)]),
             aws.SPOT_ADVISOR_URL: json.dumps({"ranges": [{"index": 0, "label": "<5%"}], "spot_advisor": {}}).encode()}
    monkeypatch.setattr(aws, "_urlopen", lambda url: io.BytesIO(files[url]))
    monkeypatch.setattr(aws, "_session_has_credentials", lambda _s: False)
    assert main(["catalog", "refresh", "--infra", "aws/us-west-2"]) == 0
    assert "reading" not in capsys.readouterr().err  # not a terminal: no progress lines by default
    assert main(["-v", "catalog", "refresh", "--infra", "aws/us-west-2"]) == 0
    err = capsys.readouterr().err
    assert "  us-west-2: reading https://pricing.us-east-1.amazonaws.com/" in err and "no AWS credentials" in err


def test_python_warnings_follow_the_level(capsys):
    log.configure(0)
    warnings.warn("a library's deprecation", UserWarning, stacklevel=1)
    assert "UserWarning: a library's deprecation" in capsys.readouterr().err
    log.configure(-1)
    warnings.warn("a library's deprecation", UserWarning, stacklevel=1)
    assert capsys.readouterr().err == ""
