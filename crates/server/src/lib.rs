//! keel-server
