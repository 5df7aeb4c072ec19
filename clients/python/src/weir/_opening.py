"""An operation that can be awaited for its result, or entered with ``async with`` so the
result is ended on exit: how sessions are opened and permits acquired."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Ending = Callable[
    [T, type[BaseException] | None, BaseException | None, TracebackType | None],
    Awaitable[None],
]


class Opening(Generic[T]):
    """Await it for the result (then ending it is yours), or use it as ``async with``:
    entered, it starts the operation; on exit, ``end`` ends what it gave."""

    def __init__(self, start: Callable[[], Awaitable[T]], end: Ending[T]) -> None:
        self._start = start
        self._end = end
        self._result: T | None = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._start().__await__()

    async def __aenter__(self) -> T:
        self._result = await self._start()
        return self._result

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._result is not None:
            await self._end(self._result, exc_type, exc, tb)
