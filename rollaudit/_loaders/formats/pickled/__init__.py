"""The formats whose dumps are pickles (``torch.save`` zips and plain pickles), read by the safe reader of
:mod:`...torchsave` without running anything they name: slime (:mod:`.slime`, its per-field conversions in
:mod:`.slime_fields`), miles, and SkyRL's training input (recognised and refused)."""
