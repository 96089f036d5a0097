//! Event-type filters live with the rest of the routing rules (`hookstream-routing`); this
//! path stays for the store's callers.

pub use hookstream_routing::EventFilter;
