"""One stream: blocks in, events out (session, driver, batch, endpointing)."""
