"""A time-first web console: a topic's records over time, a window's records, segments on a time axis,
consumer groups with their lag, and a group rewound to a time. Standard library only (see docs/console.md);
imported only by `chronolog console` and `chronolog serve --console-port`."""
