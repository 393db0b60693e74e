//! Names of work completion statuses and opcodes (`enum ibv_wc_status`, `enum ibv_wc_opcode`
//! in rdma-core's verbs.h), spelled as the constants without their `IBV_WC_` prefix.

/// `ibv_wc_status` name; `UNKNOWN` for values newer than this table.
pub(crate) fn status_name(status: u32) -> &'static str {
    const NAMES: [&str; 24] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
        "TM_ERR",
        "TM_RNDV_INCOMPLETE",
    ];
    NAMES.get(status as usize).copied().unwrap_or("UNKNOWN")
}

/// `ibv_wc_opcode` name; `UNKNOWN` for values newer than this table.
pub(crate) fn opcode_name(opcode: u32) -> &'static str {
    match opcode {
        0 => "SEND",
        1 => "RDMA_WRITE",
        2 => "RDMA_READ",
        3 => "COMP_SWAP",
        4 => "FETCH_ADD",
        5 => "BIND_MW",
        6 => "LOCAL_INV",
        7 => "TSO",
        8 => "FLUSH",
        9 => "ATOMIC_WRITE",
        128 => "RECV",
        129 => "RECV_RDMA_WITH_IMM",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_mummy_sys::{ibv_wc_opcode, ibv_wc_status};

    #[test]
    fn names_match_the_bindings_values() {
        assert_eq!(status_name(ibv_wc_status::IBV_WC_SUCCESS), "SUCCESS");
        assert_eq!(status_name(ibv_wc_status::IBV_WC_WR_FLUSH_ERR), "WR_FLUSH_ERR");
        assert_eq!(status_name(ibv_wc_status::IBV_WC_RETRY_EXC_ERR), "RETRY_EXC_ERR");
        assert_eq!(status_name(ibv_wc_status::IBV_WC_REM_ACCESS_ERR), "REM_ACCESS_ERR");
        assert_eq!(status_name(ibv_wc_status::IBV_WC_TM_RNDV_INCOMPLETE), "TM_RNDV_INCOMPLETE");
        assert_eq!(status_name(999), "UNKNOWN");
        assert_eq!(opcode_name(ibv_wc_opcode::IBV_WC_SEND), "SEND");
        assert_eq!(opcode_name(ibv_wc_opcode::IBV_WC_RDMA_WRITE), "RDMA_WRITE");
        assert_eq!(opcode_name(ibv_wc_opcode::IBV_WC_RECV), "RECV");
        assert_eq!(opcode_name(ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM), "RECV_RDMA_WITH_IMM");
        assert_eq!(opcode_name(ibv_wc_opcode::IBV_WC_ATOMIC_WRITE), "ATOMIC_WRITE");
        assert_eq!(opcode_name(77), "UNKNOWN");
    }
}
