"""Memory family: tensor layouts, gathers and scatters, bus burst accounting."""
