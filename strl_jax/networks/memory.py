"""Recurrent memory (rsl_rl/st_rl `Memory`): multi-layer LSTM or GRU with torch's gate layout.

The cells follow `torch.nn.LSTM`/`torch.nn.GRU` exactly (gate order, two bias vectors, uniform
init in +-1/sqrt(H)), so weights move between the two libraries without reshuffling. A hidden
state is `h[L, B, H]` for a GRU and the pair `(h, c)` for an LSTM, like torch.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

RNN_TYPES = ("lstm", "gru")


def _torch_uniform(hidden_size: int):
    bound = 1.0 / jnp.sqrt(hidden_size)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class LSTMCell(nn.Module):
    """One LSTM layer step; gates (i, f, g, o) as in torch."""

    hidden_size: int

    @nn.compact
    def __call__(self, h: jax.Array, c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        init = _torch_uniform(self.hidden_size)
        w_ih = self.param("weight_ih", init, (4 * self.hidden_size, x.shape[-1]))
        w_hh = self.param("weight_hh", init, (4 * self.hidden_size, self.hidden_size))
        b_ih = self.param("bias_ih", init, (4 * self.hidden_size,))
        b_hh = self.param("bias_hh", init, (4 * self.hidden_size,))
        gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        return h, c


class GRUCell(nn.Module):
    """One GRU layer step; gates (r, z, n) as in torch."""

    hidden_size: int

    @nn.compact
    def __call__(self, h: jax.Array, x: jax.Array) -> jax.Array:
        init = _torch_uniform(self.hidden_size)
        w_ih = self.param("weight_ih", init, (3 * self.hidden_size, x.shape[-1]))
        w_hh = self.param("weight_hh", init, (3 * self.hidden_size, self.hidden_size))
        b_ih = self.param("bias_ih", init, (3 * self.hidden_size,))
        b_hh = self.param("bias_hh", init, (3 * self.hidden_size,))
        xi = jnp.split(x @ w_ih.T + b_ih, 3, axis=-1)
        hh = jnp.split(h @ w_hh.T + b_hh, 3, axis=-1)
        r = nn.sigmoid(xi[0] + hh[0])
        z = nn.sigmoid(xi[1] + hh[1])
        n = jnp.tanh(xi[2] + r * hh[2])
        return (1.0 - z) * n + z * h


def initial_hidden(rnn_type: str, num_layers: int, batch: int, hidden_size: int):
    """Zero hidden state for `batch` sequences."""
    zeros = jnp.zeros((num_layers, batch, hidden_size), jnp.float32)
    return (zeros, zeros) if rnn_type == "lstm" else zeros


def reset_hidden(hidden, done: jax.Array):
    """Zero the hidden state of sequences whose episode just ended (`done[B]`)."""
    keep = (1.0 - done.astype(jnp.float32))[None, :, None]
    return jax.tree.map(lambda h: h * keep, hidden)


class Memory(nn.Module):
    """Stacked LSTM/GRU applied one step at a time: `(x[B, D], hidden) -> (y[B, H], hidden)`."""

    rnn_type: str = "lstm"
    hidden_size: int = 256
    num_layers: int = 1

    @nn.compact
    def __call__(self, x: jax.Array, hidden):
        if self.rnn_type not in RNN_TYPES:
            raise ValueError(f"unknown rnn_type {self.rnn_type!r}; valid choices: {list(RNN_TYPES)}")
        if self.rnn_type == "lstm":
            hs, cs = hidden
            new_h, new_c = [], []
            for layer in range(self.num_layers):
                h, c = LSTMCell(self.hidden_size, name=f"layer_{layer}")(hs[layer], cs[layer], x)
                new_h.append(h)
                new_c.append(c)
                x = h
            return x, (jnp.stack(new_h), jnp.stack(new_c))
        new_h = []
        for layer in range(self.num_layers):
            x = GRUCell(self.hidden_size, name=f"layer_{layer}")(hidden[layer], x)
            new_h.append(x)
        return x, jnp.stack(new_h)
