"""Process life: backoff for retry loops, stopping background loops, and the standby worker's
contract with its launcher."""
