"""The executor that supervises one task's user process inside a YARN container."""
