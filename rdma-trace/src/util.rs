//! Small generic helpers with no knowledge of RDMA.

use std::collections::VecDeque;

/// Appends to a bounded list, letting the oldest go.
pub(crate) fn push_capped<T>(list: &mut VecDeque<T>, cap: usize, v: T) {
    list.push_back(v);
    if list.len() > cap {
        list.pop_front();
    }
}
