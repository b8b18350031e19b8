"""Test-selection helpers of the reference API: the GPU's architecture, filtered tests, an ignored env variable."""

import functools
import os
from collections.abc import Callable

import torch

__all__ = ["get_arch_major", "ignore_env", "test_filter"]


def get_arch_major() -> int:
    """The major compute capability of the current CUDA device (9 on Hopper).

    Raises:
        RuntimeError: no CUDA device.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("get_arch_major: needs a CUDA GPU, but torch.cuda.is_available() is False")
    return torch.cuda.get_device_capability()[0]


def test_filter(condition: Callable[[], bool]) -> Callable:
    """Decorate a test function so that it runs only when ``condition()`` is true.

    Otherwise the call prints ``<name>:``, `` > Filtered by <condition>`` and an empty line, and
    returns ``None`` (the reference's behaviour). ``condition`` is evaluated at each call.

    Raises:
        TypeError: ``condition`` is not callable.
    """
    if not callable(condition):
        raise TypeError(f"test_filter: condition must be callable, got {type(condition).__name__}")

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: object, **kwargs: object) -> object:
            if condition():
                return func(*args, **kwargs)
            print(f"{func.__name__}:")
            print(f" > Filtered by {condition}")
            print()
            return None

        return wrapper

    return decorator


# (pytest would collect the name as a test where a test module imports it)
test_filter.__test__ = False


def ignore_env(name: str, condition: Callable[[], bool]) -> Callable:
    """Decorate a function so that, when ``condition()`` is true, it runs with env variable ``name`` unset.

    The variable is restored after the call (also when it raises); when ``condition()`` is false the
    function runs with the environment as it is.

    Raises:
        TypeError: ``name`` is not a str or ``condition`` is not callable.
    """
    if not isinstance(name, str):
        raise TypeError(f"ignore_env: name must be a str, got {type(name).__name__}")
    if not callable(condition):
        raise TypeError(f"ignore_env: condition must be callable, got {type(condition).__name__}")

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: object, **kwargs: object) -> object:
            if not condition():
                return func(*args, **kwargs)
            saved = os.environ.pop(name, None)
            try:
                return func(*args, **kwargs)
            finally:
                if saved is not None:
                    os.environ[name] = saved

        return wrapper

    return decorator
