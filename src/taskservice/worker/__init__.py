"""Workers: the pool that claims and leases tasks, and the executor that runs them."""
