"""External hardware flows: synthesis (``synth``), formal proofs (``formal``) and finding the
tools innet drives (``tools``)."""
