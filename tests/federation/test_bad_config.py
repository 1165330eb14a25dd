"""Bad configuration fails before any work starts, with a message naming the key and the valid values."""

import pytest

from fl_privtext.cli import main


@pytest.mark.parametrize(
    "sets,needle",
    [
        (["federation.num-clients=100000"], "exceeds the"),
        (["privacy.epsilonn=1"], "Unknown config key 'privacy.epsilonn'"),
        (["privacy.epsilon=-1"], "privacy.epsilon must be a finite number > 0"),
        (["data.aux-frac=1.5"], "data.aux-frac must lie in the open interval (0, 1)"),
        (["data.aux-frac=0"], "data.aux-frac must lie in the open interval (0, 1)"),
        (["privacy.mechanism=nope"], "nope"),
        (["data.name=nope"], "nope"),
        (["federation.schedule=sometimes"], "repeat, stream"),
    ],
)
def test_run_rejects_bad_config_with_exit_2(sets, needle, capsys, tmp_path):
    args = ["run", "--output", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
