"""Following a run while it trains: which dump files are whole (:mod:`.files`), sleeping until the directory
changes (:mod:`.follow`), the loop that audits each step as it lands (:mod:`.run`), and what it says of each step
(:mod:`.records`)."""
