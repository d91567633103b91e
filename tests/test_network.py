"""Nothing reaches the network during work on local models and data (issue 67, item 7): ``cselab train`` and
``probe run`` on the packaged MiniLM, in a child process without the offline variables of the test session and with
every socket refused, make no attempt. (Before: ``datasets.load_dataset`` counted each load of the augment cache with
a request to the hub's servers, and each best checkpoint's card looked its base model up on the hub.)"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: Run in the child: every way to open a connection or resolve a name records the attempt (with where it came from)
#: and fails; then each command line of argv.json through cselab's main, in order, stopping at the first that fails.
BOOTSTRAP = textwrap.dedent("""
    import json, socket, sys, traceback

    record, commands = sys.argv[1], json.load(open(sys.argv[2]))

    def refused(name):
        def attempt(*args, **kwargs):
            with open(record, "a") as out:
                out.write(f"{name} {args!r}\\n{''.join(traceback.format_stack(limit=25))}\\n")
            raise OSError(f"{name}: no network in this test")
        return attempt

    socket.socket.connect = refused("socket.connect")
    socket.socket.connect_ex = refused("socket.connect_ex")
    socket.create_connection = refused("socket.create_connection")
    socket.getaddrinfo = refused("socket.getaddrinfo")

    from cselab.cli import main

    for argv in commands:
        code = main(argv)
        if code:
            sys.exit(code)
""")

OFFLINE = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@pytest.mark.slow
def test_train_and_probe_run_on_the_packaged_model_reach_no_network(tiny_cache, data_dir, tmp_path):
    run = tmp_path / "run"
    commands = [["train", "--method", "osscse", "--model", "minilm", "--data", str(tiny_cache), "--data-dir",
                 str(data_dir), "--eval-limit", "20", "--out", str(run), "--set", "training.max_steps=2", "--set",
                 "training.eval_steps=2", "--set", "training.batch_size=16", "--set", "training.max_length=24"],
                ["probe", "run", "--model", str(run / "best"), "--suite", "sts", "--limit", "20", "--no-cache",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "results.json")]]
    (tmp_path / "bootstrap.py").write_text(BOOTSTRAP)
    (tmp_path / "argv.json").write_text(json.dumps(commands))
    env = {key: value for key, value in os.environ.items() if key not in OFFLINE}
    env.update(HF_HOME=str(tmp_path / "hf-home"), PYTHONPATH=str(Path(__file__).parents[1]))  # no cached registry
    attempts = tmp_path / "attempts.txt"
    done = subprocess.run([sys.executable, str(tmp_path / "bootstrap.py"), str(attempts), str(tmp_path / "argv.json")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert not attempts.exists(), attempts.read_text()[:4000]
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "best" / "modules.json").is_file()  # the cselab-module layout, written by sentence-transformers
    assert (run / "best" / "README.md").read_text().count("cselab") > 1  # cselab's card, not the library's
    assert "STS-B" in json.loads((tmp_path / "results.json").read_text())["sts"]
