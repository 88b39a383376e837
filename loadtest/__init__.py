"""``pytest loadtest --run-load``: the matrix, smoke and soak scenarios (the
library they drive is ``stint.lab``)."""
