//! BTF resolution against the real BTF of the two lab kernels (Debian 6.12 and 7.3,
//! copied from /sys/kernel/btf in the guest). Expected offsets were read independently
//! with bpftool on the same blobs (see docs/probes.md).

use rdma_trace::plan::btf::{self, BtfSource};
use rdma_trace::plan::catalog::{CATALOG, Kind};
use rdma_trace::plan::select::{self, Plan};
use rdma_trace_common::{SRC_ARG0, SRC_NONE, SRC_RET, SRC_TASK};

mod common;

use common::fixture_plan::*;

fn probe<'a>(plan: &'a Plan, id: &str) -> &'a select::Planned {
    plan.probes.iter().find(|p| p.spec.id.as_str() == id).unwrap_or_else(|| {
        panic!(
            "{id} not planned; skipped: {:?}",
            plan.skipped.iter().map(|s| (s.spec.id, &s.reason)).collect::<Vec<_>>()
        )
    })
}

#[test]
fn every_probe_resolves_on_both_kernels() {
    for k in [K612, K73] {
        let plan = plan_for(k);
        let kernel = |kind: &Kind| !matches!(kind, Kind::Uprobe { .. });
        let skipped: Vec<_> = plan
            .skipped
            .iter()
            .filter(|s| kernel(&s.spec.kind))
            .map(|s| format!("{}: {}", s.spec.id, s.reason))
            .collect();
        assert!(skipped.is_empty(), "{k}: {skipped:?}");
        assert_eq!(plan.probes.len(), CATALOG.iter().filter(|s| kernel(&s.kind)).count());
    }
}

#[test]
fn umem_symbol_and_module_drift() {
    let p = plan_for(K612);
    let u = probe(&p, "umem_get");
    assert_eq!((u.symbol, u.module.as_str()), ("ib_umem_get", "ib_uverbs"));
    let p = plan_for(K73);
    let u = probe(&p, "umem_get");
    assert_eq!((u.symbol, u.module.as_str()), ("__ib_umem_get_va", "ib_core"));
    // Both read (device, addr, size, access): addr is the 2nd parameter.
    assert_eq!(u.entry.fetches[0].src, SRC_ARG0 + 1);
    // The returned umem: address at 32, length at 24, iova at 16 on both kernels.
    let r = u.ret.unwrap();
    assert_eq!(r.fetches[0].src, SRC_RET);
    assert_eq!((r.fetches[1].offsets[0], r.fetches[2].offsets[0], r.fetches[3].offsets[0]), (32, 24, 16));
}

#[test]
fn umem_pin_reads_the_memlock_limit_and_pinned_vm_from_the_task() {
    // task_struct.signal, signal_struct.rlim[8] (RLIMIT_MEMLOCK: rlim is at 680 on 6.12,
    // 704 on 7.3; struct rlimit is 16 bytes), task_struct.mm, mm_struct.pinned_vm: read
    // from the same blobs with a BTF parser of its own (a script outside this project).
    for (k, signal, rlim, mm, pinned_vm) in [(K612, 3072, 680, 2304, 272), (K73, 3520, 704, 2744, 624)] {
        let p = plan_for(k);
        let f = probe(&p, "umem_get").entry.fetches;
        let names: Vec<_> = CATALOG[0].entry.iter().map(|f| f.name()).collect();
        assert_eq!(&names[3..], ["memlock_limit", "memlock_max", "pinned_vm_pages"], "{k}");
        for (i, want) in
            [(3, [signal, rlim + 8 * 16]), (4, [signal, rlim + 8 * 16 + 8]), (5, [mm, pinned_vm])]
        {
            assert_eq!(f[i].src, SRC_TASK, "{k} {}", names[i]);
            assert_eq!((f[i].hops, f[i].size), (2, 8), "{k} {}", names[i]);
            assert_eq!([f[i].offsets[0], f[i].offsets[1]], want, "{k} {}", names[i]);
        }
    }
}

#[test]
fn a_path_into_an_array_is_checked_against_its_length() {
    let mut src = BtfSource::open(&kernel_fixture(K73)).unwrap();
    let vmlinux = src.module("vmlinux").unwrap();
    // rlim has RLIM_NLIMITS (16) elements.
    let ok = btf::resolve_from_struct(vmlinux, "task_struct", "signal->rlim[15].rlim_max", &[]).unwrap();
    assert_eq!(ok, (vec![3520, 704 + 15 * 16 + 8], 8));
    let e = btf::resolve_from_struct(vmlinux, "task_struct", "signal->rlim[16].rlim_cur", &[]).unwrap_err();
    assert!(e.to_string().contains("16 elements"), "{e}");
    let e = btf::resolve_from_struct(vmlinux, "task_struct", "signal->flags[0]", &[]).unwrap_err();
    assert!(e.to_string().contains("not an array"), "{e}");
}

#[test]
fn vm_pgoff_moved_between_kernels() {
    for (k, pgoff) in [(K612, 120), (K73, 80)] {
        let p = plan_for(k);
        let m = probe(&p, "uverbs_mmap");
        let f = m.entry.fetches;
        // vma is the 2nd parameter of ib_uverbs_mmap(filp, vma).
        assert_eq!(f[0].src, SRC_ARG0 + 1, "{k}");
        assert_eq!(
            [f[0].offsets[0], f[1].offsets[0], f[2].offsets[0]],
            [0, 8, pgoff],
            "{k}: start/end/pgoff"
        );
        assert_eq!([f[3].offsets[0], f[4].offsets[0]], [32, 24], "{k}: vm_flags / vm_page_prot");
        assert!(f.iter().take(5).all(|x| x.size == 8 && x.hops == 1), "{k}");
    }
}

#[test]
fn reg_user_mr_udata_moved_to_the_seventh_parameter() {
    for (k, udata_arg) in [(K612, 5), (K73, 6)] {
        let p = plan_for(k);
        for id in ["rxe_reg_mr", "mlx5_reg_mr"] {
            let m = probe(&p, id);
            let f = m.entry.fetches;
            assert_eq!(f[4].src, SRC_ARG0 + udata_arg, "{k} {id}: udata");
            // start, length, iova, access stay 2nd..5th.
            assert_eq!(
                [f[0].src, f[1].src, f[2].src, f[3].src],
                [SRC_ARG0 + 1, SRC_ARG0 + 2, SRC_ARG0 + 3, SRC_ARG0 + 4]
            );
            assert_eq!(f[3].size, 4, "{k} {id}: access is an int");
            // The returned ib_mr: lkey at 16, rkey at 20.
            let r = m.ret.unwrap().fetches;
            assert_eq!([r[1].offsets[0], r[2].offsets[0]], [16, 20]);
            assert_eq!([r[1].size, r[2].size], [4, 4]);
        }
    }
}

#[test]
fn completion_handler_reaches_the_cq_user_handle() {
    for k in [K612, K73] {
        let p = plan_for(k);
        let c = probe(&p, "comp_handler");
        let h = c.entry.fetches[1];
        // cq->uobject (offset 8) → ib_ucq_object.uevent.uobject.user_handle (offset 0), 8 bytes.
        assert_eq!((h.src, h.hops, h.offsets[0], h.offsets[1], h.size), (SRC_ARG0, 2, 8, 0, 8), "{k}");
        assert!(c.entry.stack == 1);
    }
}

#[test]
fn mmap_io_reads_pfn_size_and_prot_by_value() {
    for k in [K612, K73] {
        let p = plan_for(k);
        let f = probe(&p, "mmap_io").entry.fetches;
        // rdma_user_mmap_io(ucontext, vma, pfn, size, prot, entry)
        assert_eq!([f[1].src, f[2].src, f[3].src], [SRC_ARG0 + 2, SRC_ARG0 + 3, SRC_ARG0 + 4], "{k}");
        assert_eq!((f[3].hops, f[3].size), (0, 8), "{k}: pgprot_t is 8 bytes by value");
    }
}

/// The QP's number and CQs, read from `struct ib_qp` by two probes planned from two modules'
/// BTF (ib_core's `ib_modify_qp_with_udata(ib_qp, …)`, rdma_rxe's `rxe_post_send(ibqp, …)`):
/// the same offsets, so a post and a modify name the same QP and its CQs the same way as
/// `rxe_create_cq`'s `struct ib_cq *`.
#[test]
fn a_post_and_a_modify_read_the_same_qp_fields() {
    for k in [K612, K73] {
        let p = plan_for(k);
        let post = probe(&p, "rxe_post_send").entry.fetches;
        let modify = probe(&p, "modify_qp").entry.fetches;
        let at = |f: &rdma_trace_common::Fetch| (f.src, f.hops, f.offsets[0], f.size);
        // post: qp_num, send_cq, recv_cq; modify: qp_num first, the CQs last (6, 7).
        assert_eq!(at(&post[0]), at(&modify[0]), "{k}: qp_num");
        assert_eq!(at(&post[1]), at(&modify[6]), "{k}: send_cq");
        assert_eq!(at(&post[2]), at(&modify[7]), "{k}: recv_cq");
        assert_eq!((post[0].size, post[1].size, post[2].size), (4, 8, 8), "{k}");
        assert_eq!(post[2].offsets[0], post[1].offsets[0] + 8, "{k}: recv_cq follows send_cq");
    }
}

#[test]
fn create_cq_reads_the_kernel_cq_and_its_attributes() {
    for k in [K612, K73] {
        let p = plan_for(k);
        for id in ["rxe_create_cq", "mlx5_create_cq"] {
            let f = probe(&p, id).entry.fetches;
            assert_eq!((f[0].src, f[0].hops), (SRC_ARG0, 0), "{k} {id}: the struct ib_cq *");
            // struct ib_cq_init_attr { unsigned int cqe; u32 comp_vector; ... }, 2nd parameter.
            assert_eq!((f[1].src, f[1].offsets[0], f[1].size), (SRC_ARG0 + 1, 0, 4), "{k} {id}");
            assert_eq!((f[2].offsets[0], f[2].size), (4, 4), "{k} {id}");
        }
    }
}

#[test]
fn forward_declarations_complete_from_other_modules() {
    // rdma_rxe's BTF only declares struct ib_ucq_object; ib_uverbs' defines it.
    for k in [K612, K73] {
        let mut src = BtfSource::open(&kernel_fixture(k)).unwrap();
        src.preload(&["rdma_rxe", "ib_uverbs"]);
        let (rxe, others) = src.with_others("rdma_rxe").unwrap();
        let proto = btf::proto(rxe, "rxe_create_cq").unwrap();
        let path = "uobject->uevent.uobject.user_handle";
        let alone = btf::resolve(rxe, "rxe_create_cq", &proto, Some("ibcq"), path, &[]);
        assert!(alone.unwrap_err().to_string().contains("only declared"), "{k}");
        let r = btf::resolve(rxe, "rxe_create_cq", &proto, Some("ibcq"), path, &others).unwrap();
        assert_eq!((r.arg, r.offsets, r.size), (Some(0), vec![8, 0], 8), "{k}");
    }
}

#[test]
fn every_way_of_reading_vmlinux_btf_plans_the_same() {
    // The copy in memory is what a kernel that cannot mmap sysfs BTF (before 6.16) gets.
    for k in [K612, K73] {
        let lazy = format!("{:?}", plan_for(k));
        for backend in [btf::Backend::Copy, btf::Backend::Cache] {
            assert_eq!(format!("{:?}", plan_with(k, backend)), lazy, "{k}: {backend:?}");
        }
        assert!(lazy.contains("offsets"), "{k}: a plan with fetches");
    }
}

#[test]
fn rxe_mmap_info_reads_the_queue_header_through_void_and_the_key_it_returns() {
    // rxe_create_mmap_info(rxe, size, udata, void *obj): obj is a struct rxe_queue_buf *
    // (log2_elem_size at 0, index_mask at 4, both u32: drivers/infiniband/sw/rxe/
    // rxe_queue.h). The returned struct rxe_mmap_info: context at 16, info.offset (u64) at
    // 40, info.size (u32) at 48: read from the lab kernels' rdma_rxe.ko, in the loads
    // rxe_mmap's own code makes, the same on both kernels.
    for k in [K612, K73] {
        let p = plan_for(k);
        let m = probe(&p, "rxe_mmap_info");
        assert_eq!(m.symbol, "rxe_create_mmap_info", "{k}");
        let f = m.entry.fetches;
        assert_eq!((f[0].src, f[0].hops, f[0].size), (SRC_ARG0 + 1, 0, 4), "{k}: size");
        assert_eq!((f[1].src, f[1].hops, f[1].offsets[0], f[1].size), (SRC_ARG0 + 3, 1, 4, 4), "{k}");
        assert_eq!((f[2].src, f[2].hops, f[2].offsets[0], f[2].size), (SRC_ARG0 + 3, 1, 0, 4), "{k}");
        let r = m.ret.unwrap().fetches;
        assert_eq!([r[1].offsets[0], r[2].offsets[0], r[3].offsets[0]], [16, 40, 48], "{k}");
        assert_eq!([r[1].size, r[2].size, r[3].size], [8, 8, 4], "{k}");
        // rxe_mmap(context, vma): the context it looks the key up in, by value.
        let c = probe(&p, "rxe_mmap").entry.fetches[5];
        assert_eq!((c.src, c.hops, c.size), (SRC_ARG0, 0, 8), "{k}");
    }
}

#[test]
fn a_cast_applies_only_to_a_pointer() {
    let mut src = BtfSource::open(&kernel_fixture(K73)).unwrap();
    src.preload(&["rdma_rxe"]);
    let (rxe, others) = src.with_others("rdma_rxe").unwrap();
    let proto = btf::proto(rxe, "rxe_create_mmap_info").unwrap();
    let e =
        btf::resolve(rxe, "rxe_create_mmap_info", &proto, Some("size"), "(rxe_queue_buf)index_mask", &others)
            .unwrap_err();
    assert!(e.to_string().contains("not a pointer"), "{e}");
    let e = btf::resolve(rxe, "rxe_create_mmap_info", &proto, Some("obj"), "(no_such_struct)x", &others)
        .unwrap_err();
    assert!(e.to_string().contains("no struct no_such_struct"), "{e}");
}

#[test]
fn every_registration_path_reads_its_own_parameters() {
    // Positions from the prototypes in drivers/infiniband/core/umem_odp.c, umem_dmabuf.c,
    // sw/rxe/rxe_verbs.c and hw/mlx5/mr.c, the same on both kernels:
    // ib_umem_odp_get(device, addr, size, access, ops);
    // ib_umem_odp_map_dma_and_lock(umem_odp, user_virt, bcnt, access_mask, fault);
    // ib_umem_dmabuf_get{,_pinned}(device, offset, size, fd, access[, ops]);
    // {rxe,mlx5_ib}_rereg_user_mr(mr, flags, start, length, iova, access, pd, udata).
    let srcs = |p: &select::Planned| {
        p.entry.fetches.iter().filter(|f| f.src != SRC_NONE).map(|f| f.src - SRC_ARG0).collect::<Vec<_>>()
    };
    for k in [K612, K73] {
        let p = plan_for(k);
        let odp = probe(&p, "umem_odp_get");
        assert_eq!(srcs(odp), [1, 2, 3], "{k}: odp get");
        // struct ib_umem_odp starts with its struct ib_umem: address at 32, length at 24.
        let r = odp.ret.unwrap().fetches;
        assert_eq!((r[0].src, r[1].offsets[0], r[2].offsets[0]), (SRC_RET, 32, 24), "{k}: odp umem");
        assert_eq!(srcs(probe(&p, "odp_fault")), [0, 1, 2, 4], "{k}: odp fault");
        for id in ["umem_dmabuf_get", "umem_dmabuf_pinned"] {
            assert_eq!(srcs(probe(&p, id)), [1, 2, 3, 4], "{k}: {id}");
        }
        for id in ["rxe_rereg_mr", "mlx5_rereg_mr"] {
            assert_eq!(srcs(probe(&p, id)), [0, 1, 2, 3, 5], "{k}: {id}");
        }
    }
}

#[test]
fn mlx5_mmap_numbers_are_the_lab_kernels_own() {
    use rdma_trace::plan::mlx5::{self, Check};
    let mut tlp = Vec::new();
    for k in [K612, K73] {
        let mut src = BtfSource::open(&kernel_fixture(k)).unwrap();
        let n = mlx5::constants().len();
        assert_eq!(mlx5::check(src.module("mlx5_ib")), Check::Agrees(n), "{k}");
        let module = src.module("mlx5_ib").unwrap();
        // The check reads the kernel's numbers: a wrong or missing one is named.
        let wrong =
            mlx5::differences(&[("MLX5_IB_MMAP_WC_PAGE", 4), ("MLX5_IB_MMAP_NO_SUCH", 1)], module).unwrap();
        assert_eq!(
            wrong,
            [
                "MLX5_IB_MMAP_WC_PAGE is 2 in this kernel, rdma-trace decodes it as 4",
                "MLX5_IB_MMAP_NO_SUCH is not in this kernel's mlx5_ib"
            ],
            "{k}"
        );
        // The dynamic entries' kinds drift: 7.3 added a TLP VAR page.
        let kinds = mlx5::enumerators(module, "MLX5_IB_MMAP_TYPE_").unwrap();
        assert_eq!(kinds.get("MLX5_IB_MMAP_TYPE_UAR_WC"), Some(&3), "{k}: {kinds:?}");
        assert_eq!(kinds.get("MLX5_IB_MMAP_TYPE_UAR_NC"), Some(&4), "{k}: {kinds:?}");
        tlp.push(kinds.contains_key("MLX5_IB_MMAP_TYPE_TLP_VAR"));
    }
    assert_eq!(tlp, [false, true]);
    // A kernel without mlx5_ib loaded has nothing to check.
    let mut src = BtfSource::open(&kernel_fixture(K73)).unwrap();
    assert_eq!(mlx5::check(src.module("no_such_module")), Check::NotLoaded);
}
