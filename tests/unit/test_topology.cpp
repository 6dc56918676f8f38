// `nvidia-smi topo -m` outputs from real machines (tests/data/topo, see its SOURCES.md): each
// parses to its GPU count, class and fast groups; broken files fail naming the line.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "topology/topology.hpp"

namespace st {
namespace {

std::string fixture_path(const std::string& name) { return std::string(ST_SOURCE_DIR) + "/tests/data/topo/" + name; }

std::string fixture_text(const std::string& name) {
  std::ifstream in(fixture_path(name));
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

using Groups = std::vector<std::vector<int>>;

struct Expected {
  const char* file;
  int gpus, nics;
  NodeClass node_class;
  Groups groups;
  LinkKind across;
};

// What GoogleTest prints for a case: the file it reads.
void PrintTo(const Expected& e, std::ostream* os) { *os << e.file; }

class Fixture : public ::testing::TestWithParam<Expected> {};

TEST_P(Fixture, ParsesAndClassifies) {
  const Expected& e = GetParam();
  const Topology t = read_topology_file(fixture_path(e.file));
  EXPECT_EQ(t.gpu_count(), e.gpus);
  EXPECT_EQ(static_cast<int>(t.nics.size()), e.nics);
  const TopologySummary s = summarize(t);
  EXPECT_EQ(node_class_name(s.node_class), node_class_name(e.node_class));
  EXPECT_EQ(s.fast_groups, e.groups);
  EXPECT_EQ(s.across.kind, e.across);
  // Every GPU has its best NIC when there are NICs.
  ASSERT_EQ(static_cast<int>(s.nics.size()), e.gpus);
  for (const auto& p : s.nics) EXPECT_EQ(p.nic >= 0, e.nics > 0);
}

const Groups kAll8 = {{0, 1, 2, 3, 4, 5, 6, 7}};
const Groups kQuads = {{0, 1, 2, 3}, {4, 5, 6, 7}};

INSTANTIATE_TEST_SUITE_P(
    RealOutputs, Fixture,
    ::testing::Values(
        Expected{"01_h100-sxm-8gpu_aws-p5.48xlarge_nv18.txt", 8, 0, NodeClass::nvswitch, kAll8, LinkKind::nvlink},
        Expected{"03_a100-sxm4-80gb-8gpu_nv12_8nic_dual-socket.txt", 8, 8, NodeClass::nvswitch, kAll8, LinkKind::nvlink},
        Expected{"05_v100-sxm2-8gpu_dgx1-hybrid-cube-mesh_mlx5.txt", 8, 1, NodeClass::nvlink_partial, kQuads,
                 LinkKind::sys},
        Expected{"06_rtx-a6000-8gpu_nvlink-bridge-pairs-nv4_dual-socket_2nic.txt", 8, 2, NodeClass::nvlink_partial,
                 Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}, LinkKind::sys},
        Expected{"08_rtx4090-8gpu_pcie-only-all-sys_dual-socket_2nic_tabs.txt", 8, 2, NodeClass::pcie_cross_socket,
                 kAll8, LinkKind::sys},
        Expected{"09_l40s-4gpu_aws-g6e.12xlarge_pcie-node.txt", 4, 0, NodeClass::pcie_host_bridge, Groups{{0, 1, 2, 3}},
                 LinkKind::node},
        Expected{"11_h100-4gpu_nv6-direct_4nic_numa-per-gpu.txt", 4, 4, NodeClass::nvlink_full_mesh,
                 Groups{{0, 1, 2, 3}}, LinkKind::nvlink},
        Expected{"12_rtx4090-1gpu_single.txt", 1, 0, NodeClass::single_gpu, Groups{{0}}, LinkKind::self},
        Expected{"14_rtx-a5000-8gpu_pcie-pxb-pix_dual-socket_mlx5.txt", 8, 2, NodeClass::pcie_cross_socket, kQuads,
                 LinkKind::sys}),
    // Each case named by its file ("f01_h100_sxm_8gpu_..."), so ctest lists which output failed.
    [](const ::testing::TestParamInfo<Expected>& param_info) {
      std::string name = std::string("f") + param_info.param.file;
      name = name.substr(0, name.rfind(".txt"));
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

TEST(Topology, ReadsLinksAffinityAndNicNames) {
  const Topology t = read_topology_file(fixture_path("03_a100-sxm4-80gb-8gpu_nv12_8nic_dual-socket.txt"));
  EXPECT_EQ(link_name(t.gpu_gpu[2][5]), "NV12");
  EXPECT_EQ(t.gpu_gpu[2][5].nvlinks, 12);
  EXPECT_EQ(link_name(t.gpu_nic[4][4]), "PXB");
  EXPECT_EQ(link_name(t.gpu_nic[0][7]), "SYS");
  EXPECT_EQ(t.cpu_affinity[5], "32-63,96-127");
  EXPECT_EQ(t.numa_affinity[5], "1");
  EXPECT_EQ(t.nics[3], "NIC3 (mlx5_3)");
  const TopologySummary s = summarize(t);
  EXPECT_EQ(s.nics[5].nic, 4);  // GPU5's PXB neighbours are NIC4 and NIC5: the first
  EXPECT_DOUBLE_EQ(link_gbps(s.within), 300.0);  // 12 links x 25 GB/s
}

TEST(Topology, TabSeparatedWithEmptyFields) {
  const Topology t = read_topology_file(fixture_path("08_rtx4090-8gpu_pcie-only-all-sys_dual-socket_2nic_tabs.txt"));
  EXPECT_EQ(t.cpu_affinity[4], "56-111,168-223");
  EXPECT_EQ(t.numa_affinity[4], "1");
  EXPECT_EQ(link_name(t.gpu_nic[6][0]), "PHB");
  EXPECT_EQ(summarize(t).nics[6].nic, 0);
}

TEST(Topology, CubeMeshLinksAndMlxColumn) {
  const Topology t = read_topology_file(fixture_path("05_v100-sxm2-8gpu_dgx1-hybrid-cube-mesh_mlx5.txt"));
  EXPECT_EQ(link_name(t.gpu_gpu[0][3]), "NV2");
  EXPECT_EQ(link_name(t.gpu_gpu[0][4]), "NV2");
  EXPECT_EQ(link_name(t.gpu_gpu[1][4]), "SYS");
  EXPECT_EQ(t.nics, std::vector<std::string>{"mlx5_0"});
  const TopologySummary s = summarize(t);
  EXPECT_EQ(link_name(s.within), "NV1");  // the weakest link inside a quad
}

// The error message for this text, or "" when it parses.
std::string error_of(const std::string& text) {
  try {
    parse_nvidia_smi_topo(text, "topo.txt");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Topology, TruncatedFileNamesTheLine) {
  const std::string full = fixture_text("09_l40s-4gpu_aws-g6e.12xlarge_pcie-node.txt");
  // Cut after the header and two rows: rows GPU2 and GPU3 are missing.
  std::istringstream in(full);
  std::string cut, line;
  for (int i = 0; i < 3 && std::getline(in, line); ++i) cut += line + "\n";
  const std::string e = error_of(cut);
  EXPECT_NE(e.find("topo.txt:4:"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("GPU2"), std::string::npos) << e;
  // Cut in the middle of the last row ("GPU3    NODE    NODE").
  const auto last = full.find("GPU3    NODE");
  ASSERT_NE(last, std::string::npos);
  const std::string mid = error_of(full.substr(0, last + 20));
  EXPECT_NE(mid.find("topo.txt:5:"), std::string::npos) << mid;
  EXPECT_NE(mid.find("row GPU3 has 2 entries, the header names 4 devices"), std::string::npos) << mid;
}

TEST(Topology, MalformedFilesNameTheLine) {
  const std::string header = "\tGPU0\tGPU1\tCPU Affinity\n";
  EXPECT_EQ(error_of(header + "GPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"), "");
  std::string e = error_of(header + "GPU0\t X \tNV4\t0-7\nGPU1\tFAST\t X \t0-7\n");
  EXPECT_NE(e.find("topo.txt:3: row GPU1, column GPU0: 'FAST' is not a link"), std::string::npos) << e;
  e = error_of(header + "GPU0\t X \tNV4\t0-7\nGPU1\tPIX\t X \t0-7\n");
  EXPECT_NE(e.find("topo.txt:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("not symmetric"), std::string::npos) << e;
  e = error_of(header + "GPU0\tSYS\tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n");
  EXPECT_NE(e.find("topo.txt:2: row GPU0, column GPU0: 'SYS' on the diagonal"), std::string::npos) << e;
  e = error_of(header + "GPU1\t X \tNV4\t0-7\nGPU0\tNV4\t X \t0-7\n");
  EXPECT_NE(e.find("topo.txt:2: expected the row of GPU0, found 'GPU1'"), std::string::npos) << e;
  e = error_of("");
  EXPECT_NE(e.find("topo.txt: no header row"), std::string::npos) << e;
  e = error_of("this is not a topology\n");
  EXPECT_NE(e.find("no header row"), std::string::npos) << e;
  e = error_of(header);
  EXPECT_NE(e.find("topo.txt:2: the matrix ends after 0 of its 2 rows"), std::string::npos) << e;
}

TEST(Topology, MissingFileIsAnError) {
  try {
    read_topology_file("/nonexistent/topo.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open topology file '/nonexistent/topo.txt': No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace st
