"""What the run trained with: :mod:`.fit` says which preset the recorded advantages come from, :mod:`.parts` splits
a run that changed scheme into its parts, :mod:`.partial` reads the recorded advantages of groups a dump holds in
part, and :mod:`.trained` says which scheme the run trained with and on what evidence."""
