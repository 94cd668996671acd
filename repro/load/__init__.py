"""Driving load: a round's state, the driver, the watchdog, the clients, pacing, conversations, sharding over worker processes."""
