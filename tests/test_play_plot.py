"""`python -m strl_jax.play` and `python -m strl_jax.plot` on a real (tiny) run."""

from __future__ import annotations

import base64
import json
import re
import shutil
import zlib

import pytest
from PIL import Image
from tiny_config import tiny

import strl_jax.play as play_module
from strl_jax.configs.loader import resolve_config
from strl_jax.play import main as play_main
from strl_jax.play import offscreen_problem
from strl_jax.plot import main as plot_main
from strl_jax.train_loops.runner import train

TINY = tiny("runner.max_iterations=3")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("run")
    return train(resolve_config("inverted_pendulum", overrides=TINY), log_dir, verbose=False)


def test_play_reports_episodes_and_writes_a_viewer_page(trained, tmp_path, capsys):
    # 4 episodes = runner.num_eval_envs: the compiled rollout is shared with the evaluation test
    assert play_main([str(trained.log_dir), "--episodes", "4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint 3, 4 deterministic episodes" in out
    assert "return " in out and "length " in out
    page = (tmp_path / "episode.html").read_text()
    assert "Brax visualizer" in page
    payload = re.search(r'var system = "([^"]+)"', page).group(1)
    frames = json.loads(zlib.decompress(base64.b64decode(payload)))["states"]["x"]
    steps = int(re.search(r"episode 0 \(return [-0-9.]+, (\d+) steps\)", out).group(1))
    assert len(frames) == steps >= 1
    problem = offscreen_problem()  # where MuJoCo can render, the GIF must come out right
    if problem is None:
        with Image.open(tmp_path / "episode.gif") as gif:
            assert gif.n_frames == steps and gif.size == (320, 240)
        assert f"video: {tmp_path / 'episode.gif'}" in out
    else:
        assert f"video skipped, MuJoCo cannot render here ({problem})" in out
        assert not (tmp_path / "episode.gif").exists()


def test_play_reports_a_rendering_failure_where_mujoco_can_render(trained, tmp_path, capsys, monkeypatch):
    """A renderer that breaks while an OpenGL context exists is an error naming the cause (exit 1),
    not a skipped video."""
    from brax.io import image

    def broken(*args, **kwargs):
        raise RuntimeError("the scene has no camera")

    monkeypatch.setattr(play_module, "offscreen_problem", lambda: None)
    monkeypatch.setattr(image, "render_array", broken)
    assert play_main([str(trained.log_dir), "--episodes", "4", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "error: the episode could not be rendered (RuntimeError: the scene has no camera)" in captured.err
    assert "video skipped" not in captured.out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["{tmp}/nowhere"], "does not exist"),
        (["{run}", "--checkpoint", "1"], "no checkpoint 1 in"),
        (["{run}", "--episodes", "0"], "--episodes must be at least 1"),
        (["{tmp}"], "no checkpoints found"),
        (["{run}", "--command", "1", "0", "0"], "has no info['command']"),
    ],
)
def test_play_errors(trained, tmp_path, capsys, argv, needle):
    assert play_main([a.format(tmp=tmp_path, run=trained.log_dir) for a in argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_plot_overlays_runs(trained, tmp_path, capsys):
    other = tmp_path / "other_run"
    shutil.copytree(trained.log_dir, other)
    out = tmp_path / "curves.png"
    assert plot_main([str(trained.log_dir), str(other), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    assert plot_main([str(other)]) == 0 and (other / "curves.png").is_file()


def test_plot_errors(tmp_path, capsys):
    assert plot_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has no metrics.jsonl" in err and "Traceback" not in err
