//! keel-session
