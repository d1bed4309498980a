"""Running compiled flows: session, envelope rows, epochs, ports, checkpoint metadata."""
