"""The models the views draw from one analyzed trace: timeline lanes, a time window as a list, what
launched a kernel, device memory over time."""
