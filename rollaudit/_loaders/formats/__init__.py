"""The format plug-ins: one module per framework's dumps, each exposing ``LOADER`` (a :class:`~..base.Format`).

A format owns what it reads (files, keys, reward, recorded advantages), the reading options it takes, the preset
its framework trains with by default, and what its dumps cannot support. Formats use the Arrow readers
(:mod:`..arrow`) and the safe ``torch.save`` reader (:mod:`..torchsave`); they know nothing of how a run is
scheduled (:mod:`..run`). The formats whose dumps are pickles
(slime, miles, SkyRL) are a room of their own, :mod:`.pickled`.
"""
