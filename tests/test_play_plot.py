"""`python -m strl_jax.play` and `python -m strl_jax.plot` on a real (tiny) run."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image
from tiny_config import tiny

import strl_jax.play as play_module
from strl_jax.configs.loader import resolve_config
from strl_jax.play import main as play_main
from strl_jax.plot import main as plot_main
from strl_jax.runners.runner import train

TINY = tiny("runner.max_iterations=3")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("run")
    return train(resolve_config("inverted_pendulum", overrides=TINY), log_dir, verbose=False)


def viewer_page_steps(out: str, folder) -> int:
    """The episode the viewer page holds: its frames are the steps `play` reports."""
    page = (folder / "episode.html").read_text()
    assert "Brax visualizer" in page
    payload = re.search(r'var system = "([^"]+)"', page).group(1)
    frames = json.loads(zlib.decompress(base64.b64decode(payload)))["states"]["x"]
    steps = int(re.search(r"episode 0 \(return [-0-9.]+, (\d+) steps\)", out).group(1))
    assert len(frames) == steps >= 1
    return steps


def test_play_reports_episodes_and_writes_a_viewer_page_and_a_gif_of_every_step(
    trained, tmp_path, capsys, monkeypatch
):
    """The renderer stubbed (MuJoCo renders only where an OpenGL library is installed): it is asked
    for every step of the episode at 240 x 320, and each frame it draws is one frame of the GIF."""
    from brax.io import image

    asked = []

    def frames(system, states, height, width):
        asked.append((len(states), height, width))
        return [np.full((height, width, 3), 10 * i % 256, np.uint8) for i in range(len(states))]

    monkeypatch.setattr(play_module, "offscreen_problem", lambda: None)
    monkeypatch.setattr(image, "render_array", frames)
    # 4 episodes = runner.num_eval_envs: the compiled rollout is shared with the evaluation test
    assert play_main([str(trained.log_dir), "--episodes", "4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint 3, 4 deterministic episodes" in out
    assert "return " in out and "length " in out
    steps = viewer_page_steps(out, tmp_path)
    assert asked == [(steps, 240, 320)]
    with Image.open(tmp_path / "episode.gif") as gif:
        assert gif.n_frames == steps and gif.size == (320, 240)
    assert f"video: {tmp_path / 'episode.gif'}" in out


def test_play_without_an_offscreen_renderer_names_the_mujoco_gl_choices(
    trained, tmp_path, capsys, monkeypatch
):
    """No OpenGL library for MuJoCo (what `offscreen_problem` finds on a headless machine without
    EGL or OSMesa): the episode is still written, and the GIF's absence is explained."""
    problem = "FatalError: an OpenGL platform library has not been loaded into this process"
    monkeypatch.setattr(play_module, "offscreen_problem", lambda: problem)
    assert play_main([str(trained.log_dir), "--episodes", "4", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    viewer_page_steps(out, tmp_path)
    assert (
        f"video skipped, MuJoCo cannot render here ({problem}); try MUJOCO_GL=egl or MUJOCO_GL=osmesa\n"
        in out
    )
    assert not (tmp_path / "episode.gif").exists()


def offscreen_backend() -> str | None:
    """A `MUJOCO_GL` backend MuJoCo renders offscreen with on this machine (a fresh process each:
    the backend is fixed when mujoco is imported), or None."""
    probe = "import mujoco; mujoco.Renderer(mujoco.MjModel.from_xml_string('<mujoco/>'), 8, 8).close()"
    for backend in ("egl", "osmesa"):
        env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=120)
        if done.returncode == 0:
            return backend
    return None


def test_play_renders_a_real_gif_with_an_offscreen_renderer(trained, tmp_path):
    """`python -m strl_jax.play` with MuJoCo's real renderer, where EGL or OSMesa is installed: a
    GIF of every step, and the pendulum moves in it."""
    backend = offscreen_backend()
    if backend is None:
        pytest.skip("no offscreen OpenGL library for MuJoCo here (MUJOCO_GL=egl or osmesa)")
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    command = [sys.executable, "-m", "strl_jax.play", str(trained.log_dir), "--episodes", "4"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert f"video: {tmp_path / 'episode.gif'}" in done.stdout
    steps = viewer_page_steps(done.stdout, tmp_path)
    with Image.open(tmp_path / "episode.gif") as gif:
        # Pillow merges a frame equal to the one before: one frame per step, so the pole moved in each
        assert gif.n_frames == steps and gif.size == (320, 240)
        first = np.asarray(gif.convert("RGB"))
    # the pendulum drawn on the black background: 2.0% of the pixels (Mesa's EGL)
    assert (first.max(axis=-1) > 30).mean() > 0.01


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
