; Inno Setup script: a real Windows installer for the onedir bundle.
; Build the bundle first (python build_scripts\build.py), then:
;   iscc /DAppVersion=<version> build_scripts\windows\ia-studio.iss   (build.py prints the version)
; Output: dist\InvariantAttentionStudio-<version>-setup.exe

#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=<version> (it is written once, in pyproject.toml)
#endif

[Setup]
AppId={{6F1C2E8A-5B7D-4C39-9E3A-1D2B7A9F4E11}
AppName=Invariant Attention Studio
AppVersion={#AppVersion}
AppPublisher=Invariant Attention Studio
DefaultDirName={autopf}\Invariant Attention Studio
DefaultGroupName=Invariant Attention Studio
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
OutputDir=..\..\dist
OutputBaseFilename=InvariantAttentionStudio-{#AppVersion}-setup
SetupIconFile=..\..\resources\icons\ia-studio.ico
UninstallDisplayIcon={app}\ia-studio.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "..\..\dist\InvariantAttentionStudio\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\Invariant Attention Studio"; Filename: "{app}\ia-studio.exe"
Name: "{group}\Uninstall Invariant Attention Studio"; Filename: "{uninstallexe}"
Name: "{autodesktop}\Invariant Attention Studio"; Filename: "{app}\ia-studio.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\ia-studio.exe"; Description: "{cm:LaunchProgram,Invariant Attention Studio}"; Flags: nowait postinstall skipifsilent
