//! `rdma-direct devices`: the sim and every ibverbs device, as a table or
//! JSON: name, kind, driver, node GUID, data path, on-demand paging caps
//! (`ibv_query_device_ex`'s `odp_caps`), ports and GIDs.

pub fn devices(json: bool) -> rdma_direct::Result<()> {
    let list = rdma_direct::list_devices()?;
    let guid = |g: u64| {
        format!(
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (g >> 48) & 0xffff,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    };
    let gid = |g: &[u8; 16]| std::net::Ipv6Addr::from(*g).to_string();
    // `SEND|RECV|...`, `-` for none.
    let ops = |o: rdma_direct::OdpOps| {
        let names: Vec<&str> = o.iter_names().map(|(n, _)| n).collect();
        if names.is_empty() {
            "-".to_string()
        } else {
            names.join("|")
        }
    };
    if json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name,
                    "kind": d.kind,
                    "driver": d.driver,
                    "node_guid": guid(d.node_guid),
                    "data_path": d.data_path.as_str(),
                    "error": d.error,
                    "odp": {
                        "supported": d.odp.supported,
                        "implicit": d.odp.implicit,
                        "rc": ops(d.odp.rc),
                        "uc": ops(d.odp.uc),
                        "ud": ops(d.odp.ud),
                    },
                    "ports": d.ports.iter().map(|p| serde_json::json!({
                        "port": p.port,
                        "state": p.state,
                        "link_layer": p.link_layer,
                        "active_mtu": p.active_mtu,
                        "rate_gbps": p.rate_gbps,
                        "lid": p.lid,
                        "gids": p.gids.iter().map(|e| serde_json::json!({
                            "index": e.index,
                            "gid": gid(&e.gid),
                            "type": e.kind,
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        out!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    out!(
        "    {:<16}\t{:<8}\t{:<24}\t{:<18}\tdata path",
        "device",
        "kind",
        "driver",
        "node GUID"
    );
    out!(
        "    {:<16}\t{:<8}\t{:<24}\t{:<18}\t---------",
        "------",
        "----",
        "------",
        "---------"
    );
    for d in &list {
        out!(
            "    {:<16}\t{:<8}\t{:<24}\t{:<18}\t{}",
            d.name,
            d.kind,
            d.driver,
            guid(d.node_guid),
            d.data_path
        );
        if let Some(e) = &d.error {
            out!("        (ports unreadable: {e})");
        } else if d.odp.supported {
            out!(
                "        ODP: yes, implicit {}; RC {}, UC {}, UD {}",
                if d.odp.implicit { "yes" } else { "no" },
                ops(d.odp.rc),
                ops(d.odp.uc),
                ops(d.odp.ud)
            );
        } else {
            out!("        ODP: no");
        }
        for p in &d.ports {
            out!(
                "        port {}: {:<6} link {:<10} mtu {:<5} rate {:<8} lid {}",
                p.port,
                p.state,
                p.link_layer,
                p.active_mtu.map_or("-".into(), |m| m.to_string()),
                p.rate_gbps.map_or("-".into(), |r| format!("{r} Gb/s")),
                p.lid
            );
            for e in &p.gids {
                out!(
                    "            GID[{}] {:<10} {}",
                    e.index,
                    e.kind,
                    gid(&e.gid)
                );
            }
        }
    }
    Ok(())
}
