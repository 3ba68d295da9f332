"""Integrations: the probe's evidence from jobs written with a training framework.

Each module here runs inside the training job and imports only :mod:`faultdrill.probe`,
the standard library and the framework it integrates, lazily: importing this package, the
probe or the CLI never imports torch, transformers or lightning.

=================  ======================================================================
``observe``        sample ids observed at consumption (a dataset wrapper tags each item
                   with its dataset index, the integration reads it off the batch) and
                   the step events built from them; framework-neutral
``ckptdir``        a checkpoint directory's manifest (written once the save is complete,
                   verified before a load), the ``latest`` pointer, the newest checkpoint
                   that verifies; framework-neutral
``transformers``   a Hugging Face ``TrainerCallback`` and ``instrument(trainer)``
``lightning``      a PyTorch Lightning ``Callback``
``dcp``            ``torch.distributed.checkpoint`` directories and ``StatefulDataLoader``
                   positions
=================  ======================================================================

See ``docs/integrations.md``.
"""
