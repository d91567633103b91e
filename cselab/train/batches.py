"""The training data as torch's DataLoader reads it: the rows as a dataset, an epoch order drawn from the seed, and a
collator that tokenises each forward view's column once per batch, so that the step only encodes.

On several processes accelerate splits every batch in rank order (``split_batches``): each process collates and
encodes its own share, and in-batch negatives are gathered from all of them (:mod:`cselab.train.distributed`).
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from cselab.errors import TrainingError
from cselab.train.config.sections import TrainingConfig
from cselab.train.token_ids import TokenIds

Key = tuple[str, str | None]  # (column, prompt): the views sharing one tokenisation
ROW = "__row__"  # the loader's rows carry their indices under this name, which the collator takes out


@dataclass
class Batch:
    """A batch's rows (column -> values) and, for each ``(column, prompt)`` of a forward view, the positions of the
    rows that have the column and their padded token ids and attention mask."""

    rows: dict[str, list]
    tokens: dict[Key, tuple[list[int], torch.Tensor | None, torch.Tensor | None]] = field(default_factory=dict)


class RowsDataset(Dataset):
    """The cache's rows (a ``datasets.Dataset`` or :class:`~cselab.train.run.data.ColumnRows`), fetched a batch at a
    time, with their indices (:data:`ROW`: where the collator finds their token ids)."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitems__(self, indices: list[int]) -> dict[str, list]:
        return {**self.rows[list(indices)], ROW: list(indices)}


class EpochOrder(Sampler[int]):
    """A permutation of the rows drawn from ``seed + epoch``: the same on every process and after a resume."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())


class Collator:
    """Rows -> :class:`Batch`: the column of each ``(column, prompt)`` of ``keys`` tokenised with the encoder's
    tokenizer, that prompt and ``max_length``, after the column's text plug-in where ``texts`` names one (the method's
    ``texts``); or, with ``ids`` (:mod:`cselab.train.token_ids`, made once per corpus by that same tokenisation),
    the rows' ids padded. ``own_tokenizer``: through a copy of the tokenizer of its own (the training loader's, which
    a background thread runs while the step may tokenise too; views made here, in the caller's thread); ``pin``: the
    token tensors in pinned memory, copied to a CUDA device without a wait."""

    def __init__(self, encoder, keys: list[Key], texts: dict[str, Callable[[str], str]] | None = None,
                 own_tokenizer: bool = False, pin: bool = False, ids: dict[Key, TokenIds] | None = None):
        self.encoder, self.keys, self.texts, self.pin, self.ids = encoder, keys, texts or {}, pin, ids
        tokenizer = copy.deepcopy(encoder.tokenizer) if own_tokenizer and ids is None else None
        self.views = {prompt: encoder.text_view(prompt, tokenizer) for prompt in dict.fromkeys(p for _, p in keys)}
        self.pad_id = encoder.tokenizer.pad_token_id or 0

    def __call__(self, rows: dict[str, list]) -> Batch:
        indices = rows.pop(ROW, None)
        batch = Batch(rows)
        for column, prompt in self.keys:
            if self.ids is not None and indices is not None:
                present, ids, mask = self.ids[column, prompt].batch(indices, self.pad_id)
            else:
                present = [i for i, value in enumerate(rows[column]) if value]
                view = self.views[prompt]
                ids, mask = view.pad(view.tokenize(texts_of(rows, column, present, self.texts), warn=False)) \
                    if present else (None, None)
            if self.pin and ids is not None and mask is not None:
                ids, mask = ids.pin_memory(), mask.pin_memory()
            batch.tokens[column, prompt] = (present, ids, mask)
        return batch


class Ahead(Iterator):
    """The items of ``items`` through ``work`` (a batch's tokenisation), up to ``depth`` of them ahead of the
    consumer, each in a thread of its own (the Rust tokenizer releases the GIL, so ``depth`` batches are tokenised at
    once), in their order: a thread reads ``items`` and hands each to the pool. An error, in reading or in ``work``, is
    raised by the ``next`` that would have returned that item; :meth:`close` stops the threads."""

    def __init__(self, items: Iterator, depth: int, work: Callable = lambda item: item):
        self.queue: queue.Queue = queue.Queue(depth)
        self.stopped = threading.Event()
        self.pool = ThreadPoolExecutor(depth, thread_name_prefix="cselab-batch")
        self.thread = threading.Thread(target=self._fill, args=(items, work), name="cselab-batches", daemon=True)
        self.thread.start()

    def _put(self, entry) -> bool:
        while not self.stopped.is_set():
            try:
                self.queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self, items: Iterator, work: Callable) -> None:
        try:
            for item in items:
                if self.stopped.is_set() or not self._put(self.pool.submit(work, item)):
                    return
        except BaseException as err:  # noqa: BLE001  (handed to the consumer, raised there)
            self._put(err)
            return
        self._put(StopIteration())

    def __next__(self):
        entry = self.queue.get()
        try:
            if isinstance(entry, BaseException):
                raise entry
            return entry.result()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.stopped.set()
        while self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self.queue.get(timeout=0.1)
        self.pool.shutdown(wait=True, cancel_futures=True)


def texts_of(rows: dict[str, list], column: str, present: list[int], texts: dict[str, Callable[[str], str]]
             ) -> list[str]:
    """The ``present`` rows' texts of ``column``, through the column's text plug-in if ``texts`` names one."""
    values = [rows[column][i] for i in present]
    return [texts[column](value) for value in values] if column in texts else values


def row_texts(rows, keys: list[Key], texts: dict[str, Callable[[str], str]] | None = None) -> list[tuple[str, ...]]:
    """Each row's texts as its forward views encode them (after the columns' text plug-ins ``texts``): one per
    ``(column, prompt)`` the row has a value of, the prompt marked in front (two views of one column and prompt read
    one text)."""
    texts = texts or {}
    columns = [([texts[column](v) if v and column in texts else v for v in rows[column]], prompt)
               for column, prompt in keys]
    if len(columns) == 1 and columns[0][1] is None:
        return [(value,) if value else () for value in columns[0][0]]
    return [tuple(dict.fromkeys(f"{prompt or ''}\0{values[i]}" for values, prompt in columns if values[i]))
            for i in range(len(rows))]


class NoDuplicateBatches(BatchSampler):
    """``training.sampler: no_duplicates``: batches taken from the :class:`EpochOrder` in which no text
    (:func:`row_texts`) is in two rows; a row whose text is already in the batch waits for the next one (tried first
    there). Deterministic from the seed and the epoch, so a resumed run draws the same batches. An epoch gives
    ``len(rows) // batch_size`` batches, or a TrainingError when the duplicates leave too few distinct rows."""

    def __init__(self, order: EpochOrder, batch_size: int, texts: list[tuple[str, ...]]):
        super().__init__(order, batch_size, drop_last=True)
        self.texts = texts

    sampler: EpochOrder

    def __iter__(self) -> Iterator[list[int]]:
        order, at = list(self.sampler), 0
        waiting: list[int] = []
        for number in range(len(self)):
            batch: list[int] = []
            seen: set[str] = set()
            kept: list[int] = []
            candidates = iter(waiting)
            while len(batch) < self.batch_size:
                index = next(candidates, None)
                if index is None:
                    if at == len(order):
                        raise TrainingError(f"training.sampler: no_duplicates: epoch {self.sampler.epoch} fills only "
                                            f"{number} of its {len(self)} batches of {self.batch_size} rows without "
                                            "a text twice; deduplicate the data or use a smaller batch")
                    index, at = order[at], at + 1
                texts = self.texts[index]
                if any(text in seen for text in texts):
                    kept.append(index)
                else:
                    batch.append(index)
                    seen.update(texts)
            waiting = kept + list(candidates)
            yield batch


def as_rows(rows: dict[str, list]) -> dict[str, list]:
    """The loader's batches as the rows they are: the trainer tokenises them (:class:`Collator`), ahead of the step
    where it can (:class:`Ahead`)."""
    return rows


def training_loader(rows, config: TrainingConfig, keys: list[Key], epochs: int = 1,
                    texts: dict[str, Callable[[str], str]] | None = None) -> DataLoader:
    """Batches of ``training.batch_size`` rows in :class:`EpochOrder` (``sampler: no_duplicates``: through
    :class:`NoDuplicateBatches`, the texts of the views ``keys`` compared, after the ``texts`` plug-ins), the last
    partial one dropped, as rows
    (:func:`as_rows`; the trainer tokenises them); its own generator, so that iterating draws nothing from the global
    RNG (dropout's). ``epochs``: how many epochs the run reaches; with ``no_duplicates`` each is drawn once here, so
    that an epoch the duplicates cannot fill is refused before the first step, not when training reaches it."""
    order = EpochOrder(len(rows), config.seed)
    if config.sampler == "no_duplicates":
        batches = NoDuplicateBatches(order, config.batch_size, row_texts(rows, keys, texts))
        for epoch in range(epochs):
            order.set_epoch(epoch)
            for _ in batches:
                pass
        order.set_epoch(0)
        return DataLoader(RowsDataset(rows), batch_sampler=batches, generator=torch.Generator(),
                          collate_fn=as_rows)  # type: ignore[arg-type]  # torch's stubs: no __getitems__ batch
    return DataLoader(RowsDataset(rows), batch_size=config.batch_size, sampler=order, drop_last=True,
                      generator=torch.Generator(), collate_fn=as_rows)  # type: ignore[arg-type]  # (as above)
