"""Imported once by the worker forkserver (never by anything else): one thread, and one tiny
untimed probe so that torch's lazy imports are done before any child is forked. Every child
starts from this state and sets its own thread count."""

from __future__ import annotations

import torch

from stability.guard import warm_up

torch.set_num_threads(1)
warm_up("cpu")
