//! warmstart's routing core: the hot parts of the router, compiled, behind one small Python extension.
//!
//! Block and chain hashing ([`hashing`]), the text prefix index ([`textindex`]), vLLM's KV events
//! ([`events`]) and the index they feed ([`eventindex`]), request shares ([`shares`]), peer loads and
//! the bounds ([`loads`]), and the pick ([`picking`]). The modules are plain Rust (tested by
//! `cargo test`); [`py`] binds them to Python as `warmstart._routing_core` (feature `python`).

pub mod eventindex;
pub mod events;
pub mod hashing;
pub mod loads;
pub mod names;
pub mod picking;
pub mod shares;
pub mod textindex;

#[cfg(feature = "python")]
mod py;
