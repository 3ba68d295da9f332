"""Sample ids observed at consumption, and the step events built from them.

Framework-neutral and free of torch: the Trainer and Lightning integrations use it, and so
can evidence derived from other sources (a job's own log lines).

Contract
--------
* **Tagging.** :class:`ObservedDataset` wraps a map-style dataset whose items are mappings
  (dicts, ``BatchEncoding``): item ``i`` comes back with one more key, :data:`SAMPLE_KEY`
  = ``i`` (as a :class:`TaggedItem`). :class:`ObservedCollator` takes the key off before
  the job's own collator sees the items and puts the batch's indices back into the batch
  as a list. Nothing is derived from a step
  number: an index reaches the batch only if the dataset really handed that item out.
* **Reading.** :func:`take_indices` pops the key off a batch, so the model never sees it,
  and returns the indices, or ``None`` when the batch does not carry them (the dataset was
  not wrapped, its items are not mappings, or the collator dropped the key).
* **Sample ids.** A consumed item's id is ``epoch * len(dataset) + index``
  (:func:`consumption_ids`): with a sampler that hands out each index once per epoch (a
  permutation, no padding), every id names one consumption that happens exactly once in a
  fault-free run, which is what the sample ledger needs (``docs/probe.md``). It is not the
  position in the global stream: an id made from the *data* catches a resume that replays
  or skips data, and also one that draws a different order (a sampler whose RNG was not
  restored), which a position counter would number exactly like the right one.
* **Steps.** :class:`StepRecorder` gathers the micro-batches of one optimizer step (each
  rank its own) and writes one ``step`` event per optimizer step: the step number, the
  loss combined over the micro-batches (``sum`` or ``mean``, as the framework accounts
  it), and the ids. If any micro-batch of the step carried no ids, the event carries none
  (never a partial list), :attr:`StepRecorder.unobserved` counts it, and the reason is
  kept in :attr:`StepRecorder.why_unobserved`: the sample ledger then says the ids were
  not observable (retest) instead of judging a part of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Literal

from faultdrill.probe import Probe

__all__ = [
    "SAMPLE_KEY",
    "ObservedCollator",
    "ObservedDataset",
    "StepRecorder",
    "TaggedItem",
    "consumption_ids",
    "take_indices",
]

#: The key an :class:`ObservedDataset` adds to each item: the item's dataset index.
SAMPLE_KEY = "faultdrill_sample_index"


class TaggedItem(Mapping[str, Any]):
    """An item with its dataset index: a read-only mapping that is deliberately not a
    ``dict``, so that column filters which drop unknown keys of dicts (the Trainer's
    ``RemoveColumnsCollator``) pass it through whole to :class:`ObservedCollator`."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


class ObservedDataset:
    """A map-style dataset whose items carry their own dataset index (:data:`SAMPLE_KEY`)
    as :class:`TaggedItem` mappings.

    Items that are not mappings are returned unchanged: they cannot carry the index, and
    the integration then reports the ids as not observable. Attributes other than the
    wrapper's own are looked up on the wrapped dataset."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        item = self.dataset[index]
        if isinstance(item, Mapping):
            tagged = dict(item)
            tagged[SAMPLE_KEY] = int(index)
            return TaggedItem(tagged)
        return item

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet (e.g. while a worker unpickles it)
            raise AttributeError(name)
        return getattr(self.dataset, name)


class ObservedCollator:
    """Calls ``inner`` on the items without :data:`SAMPLE_KEY` and adds their indices to
    the batch as a list (when the batch is a mutable mapping and every item had one)."""

    def __init__(self, inner: Callable[[list[Any]], Any]) -> None:
        self.inner = inner

    def __call__(self, features: list[Any]) -> Any:
        indices = [f.get(SAMPLE_KEY) if isinstance(f, Mapping) else None for f in features]
        if not features or any(i is None for i in indices):
            return self.inner([f.data if isinstance(f, TaggedItem) else f for f in features])
        stripped = [{k: v for k, v in f.items() if k != SAMPLE_KEY} for f in features]
        batch = self.inner(stripped)
        if isinstance(batch, MutableMapping):
            batch[SAMPLE_KEY] = [int(i) for i in indices if i is not None]
        return batch


def take_indices(batch: Any) -> list[int] | None:
    """Pop :data:`SAMPLE_KEY` off ``batch`` and return the dataset indices it held (a
    tensor, a list or one int), or None when the batch carries none."""
    if not isinstance(batch, MutableMapping) or SAMPLE_KEY not in batch:
        return None
    raw = batch.pop(SAMPLE_KEY)
    values = raw.tolist() if hasattr(raw, "tolist") else raw
    if isinstance(values, int):
        return [values]
    return [int(v) for v in values]


def consumption_ids(epoch: int, size: int, indices: Iterable[int]) -> list[int]:
    """The sample ids of dataset ``indices`` consumed in ``epoch`` of a dataset of ``size``
    items: ``epoch * size + index`` each (see the module docstring)."""
    base = epoch * size
    return [base + i for i in indices]


class StepRecorder:
    """One rank's micro-batches, written as one ``step`` event per optimizer step.

    ``size`` is the dataset's length (None: unknown, so no ids can be formed); ``combine``
    how micro-batch losses make the step's loss. Not thread-safe; one per process."""

    def __init__(
        self, probe: Probe, *, size: int | None, combine: Literal["sum", "mean"] = "mean"
    ) -> None:
        self.probe = probe
        self.size = size
        self.combine = combine
        self.unobserved = 0  # steps written without ids
        self.why_unobserved = "" if size else "the dataset has no length"
        self.consumed = 0  # samples observed in the steps written so far
        self._ids: list[int] = []
        self._losses: list[float] = []
        self._blind = False

    def micro_batch(self, epoch: int, indices: Sequence[int] | None, loss: float | None) -> None:
        """Record one micro-batch: its epoch, the dataset indices it held, its loss."""
        if loss is not None:
            self._losses.append(float(loss))
        if indices is None or self.size is None:
            if indices is None and not self.why_unobserved:
                self.why_unobserved = (
                    f"a batch carried no {SAMPLE_KEY!r} (wrap the training dataset in "
                    "ObservedDataset; its items must be mappings)"
                )
            self._blind = True
            return
        self._ids.extend(consumption_ids(epoch, self.size, indices))

    def discard(self) -> None:
        """Forget the micro-batches gathered since the last step (none was taken)."""
        self._ids, self._losses, self._blind = [], [], False

    def step(self, step: int) -> None:
        """Write the optimizer step ``step`` (1 for the first) from what was gathered."""
        losses = self._losses
        loss = float("nan")
        if losses:
            loss = sum(losses) if self.combine == "sum" else sum(losses) / len(losses)
        ids: list[int] = []
        if self._blind or not self._ids:
            self.unobserved += 1
            if not self.why_unobserved:
                self.why_unobserved = "no micro-batch was recorded before the optimizer step"
        else:
            ids = sorted(self._ids)
            self.consumed += len(ids)
        self.probe.step(step, loss, ids)
        self.discard()
