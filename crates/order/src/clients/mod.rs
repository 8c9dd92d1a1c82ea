//! The order service's clients of other services, each one tower stack
//! composed in one commented function from `shopeasy-resilience`, and each
//! exposed only through the domain's ports ([`crate::stock`],
//! [`crate::catalog`]).

pub mod inventory;
pub mod product;
